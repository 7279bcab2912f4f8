package dispatch

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/execgate/execgate/secrets"
)

// A run's brokered secrets (package secrets) go from its gateway to the
// one executor the gateway confirmed, and to no one else, without ever
// being in the dispatch Redis in clear:
//
//  1. The job carries their names only (WireSpec.Secrets, signed).
//  2. An executor that takes a job with secrets makes an ephemeral X25519
//     key pair for it and sends the public key in its start frame (signed,
//     so no one without the spec key can put in a key of their own).
//  3. The gateway, confirming that executor, makes an ephemeral key pair
//     of its own and seals the values in the confirm frame: AES-256-GCM
//     under HKDF-SHA256 of the two keys' shared secret, bound to the run
//     and the executor. An executor it did not confirm gets no sealed
//     values (and runs nothing).
//  4. The executor opens them with its private key, which it then drops,
//     runs the run with them and masks them out of everything it sends
//     back (live output, reply) before it reaches Redis; the gateway masks
//     again before anything leaves it.
//
// Redis holds the two public keys and the sealed box only (on the run's
// confirm list, with a TTL): reading Redis, even with the spec key, does
// not give the values (forward secrecy: the private keys never leave the
// processes' memory). Executors hold no tenant secret config and read no
// secret file: the gateway alone resolves secrets.

// domainSecrets binds the sealing key to its purpose, run and executor.
const domainSecrets = "execgate-dispatch-secrets-v1\n"

// sealedSecrets are a run's secret values sealed for one executor.
type sealedSecrets struct {
	// Key is the gateway's ephemeral X25519 public key.
	Key []byte `json:"key"`
	// Nonce and Box are AES-256-GCM's nonce and sealed [{name, value}].
	Nonce []byte `json:"nonce"`
	Box   []byte `json:"box"`
}

// maxSealedSecrets bounds the sealed secrets of a confirm frame as
// encoded: the values at their bounds, JSON-escaped (at most 6 bytes a
// byte), then base64.
const maxSealedSecrets = secrets.MaxPerRun*(6*secrets.MaxValueBytes+128)*4/3 + 1024

// maxConfirmFrame bounds a confirm frame on the wire.
const maxConfirmFrame = maxStartFrame + maxSealedSecrets

// secretKeyPair is an executor's ephemeral key pair for one run's secrets.
func secretKeyPair() (*ecdh.PrivateKey, error) {
	return ecdh.X25519().GenerateKey(rand.Reader)
}

// secretsAEAD is the AEAD of the secrets of runID for executor, from one
// side's private key and the other side's public key.
func secretsAEAD(priv *ecdh.PrivateKey, peer *ecdh.PublicKey, gatewayPub, executorPub []byte, runID, executor string) (cipher.AEAD, error) {
	shared, err := priv.ECDH(peer)
	if err != nil {
		return nil, err
	}
	salt := slices.Concat(gatewayPub, executorPub)
	key, err := hkdf.Key(sha256.New, shared, salt, domainSecrets+runID+"\n"+executor, 32)
	clear(shared)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	clear(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// wireSecret is one secret inside the sealed box.
type wireSecret struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// sealSecrets seals vals for the executor whose start frame carried
// executorKey (gateway side).
func sealSecrets(vals []secrets.Value, executorKey []byte, runID, executor string) (*sealedSecrets, error) {
	peer, err := ecdh.X25519().NewPublicKey(executorKey)
	if err != nil {
		return nil, fmt.Errorf("the executor's key for the run's secrets: %w", err)
	}
	priv, err := secretKeyPair()
	if err != nil {
		return nil, err
	}
	pub := priv.PublicKey().Bytes()
	aead, err := secretsAEAD(priv, peer, pub, executorKey, runID, executor)
	if err != nil {
		return nil, err
	}
	plain := make([]wireSecret, len(vals))
	for i, v := range vals {
		plain[i] = wireSecret{Name: v.Name(), Value: v.Reveal()}
	}
	msg, err := json.Marshal(plain)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	box := aead.Seal(nil, nonce, msg, []byte(runID+"\n"+executor))
	clear(msg)
	return &sealedSecrets{Key: pub, Nonce: nonce, Box: box}, nil
}

var errSecretsNotIntact = errors.New("the run's secrets did not arrive intact")

// openSecrets opens s with the executor's private key (executor side): the
// values of exactly names, in that order.
func openSecrets(s *sealedSecrets, priv *ecdh.PrivateKey, names []string, runID, executor string) ([]secrets.Value, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: the gateway sent none", errSecretsNotIntact)
	}
	peer, err := ecdh.X25519().NewPublicKey(s.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errSecretsNotIntact, err)
	}
	aead, err := secretsAEAD(priv, peer, s.Key, priv.PublicKey().Bytes(), runID, executor)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errSecretsNotIntact, err)
	}
	if len(s.Nonce) != aead.NonceSize() {
		return nil, fmt.Errorf("%w: bad nonce", errSecretsNotIntact)
	}
	msg, err := aead.Open(nil, s.Nonce, s.Box, []byte(runID+"\n"+executor))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errSecretsNotIntact, err)
	}
	defer clear(msg)
	var plain []wireSecret
	if err := json.Unmarshal(msg, &plain); err != nil || len(plain) != len(names) {
		return nil, fmt.Errorf("%w: not the run's secrets", errSecretsNotIntact)
	}
	vals := make([]secrets.Value, len(plain))
	for i, p := range plain {
		if p.Name != names[i] {
			return nil, fmt.Errorf("%w: not the run's secrets", errSecretsNotIntact)
		}
		vals[i] = secrets.NewValue(p.Name, p.Value)
	}
	return vals, nil
}
