package rootfs

import (
	"context"
	"encoding/json"
	"fmt"
)

// denoVerifyTool is the JavaScript probe Verify runs in a jail of the Deno
// profile: Deno's version, and proof that its permissions hold (a file
// read, the environment and the network are denied) and imports are closed.
const denoVerifyTool = `export async function run(args, context) {
  const denied = async (f) => { try { await f(); return false } catch (e) { return e.name === "NotCapable" || e.name === "TypeError" } };
  return {
    deno: Deno.version.deno,
    v8: Deno.version.v8,
    typescript: Deno.version.typescript,
    read_denied: await denied(() => Deno.readTextFileSync("/etc/passwd")),
    env_denied: await denied(() => Deno.env.get("PATH")),
    net_denied: await denied(() => Deno.connect({hostname: "127.0.0.1", port: 1})),
    node_import_denied: await denied(() => import("node:fs")),
    ok: true,
  };
}
`

// DenoFacts is what the JavaScript probe saw inside the jail.
type DenoFacts struct {
	Deno             string `json:"deno"`
	V8               string `json:"v8"`
	TypeScript       string `json:"typescript"`
	ReadDenied       bool   `json:"read_denied"`
	EnvDenied        bool   `json:"env_denied"`
	NetDenied        bool   `json:"net_denied"`
	NodeImportDenied bool   `json:"node_import_denied"`
	OK               bool   `json:"ok"`
}

// verifyDeno runs the JavaScript probe when the tree carries Deno.
func verifyDeno(ctx context.Context, r *Report, m *Manifest, jail Jail) {
	if m.DenoVersion == "" && m.DenoStamp == "" {
		r.add("javascript in jail", true, "no deno in this rootfs (JavaScript and TypeScript unavailable)", "")
		return
	}
	res, err := jail.Probe(ctx, Probe{ID: "rootfs-verify-js", Language: "javascript", Source: denoVerifyTool})
	if err != nil {
		r.add("javascript in jail", false, err.Error(), unavailableHint(err))
		return
	}
	if !res.OK {
		detail := "run ended without a result"
		if res.ErrorType != "" {
			detail = res.ErrorType + ": " + res.ErrorMessage + "\n" + tail(res.Traceback, 1500)
		}
		r.add("javascript in jail", false, detail+"\nstderr: "+tail(res.Stderr, 1500), "deno does not start in the jail; rebuild the rootfs, then run execgate diagnose")
		return
	}
	var f DenoFacts
	if err := json.Unmarshal(res.Result, &f); err != nil || !f.OK {
		r.add("javascript in jail", false, fmt.Sprintf("decoding the probe's result %q: %v", tail(string(res.Result), 200), err), "")
		return
	}
	r.Deno = &f
	if m.DenoVersion != "" && f.Deno != m.DenoVersion {
		r.add("javascript in jail", false, fmt.Sprintf("deno %s in the jail, manifest says %s", f.Deno, m.DenoVersion), "rebuild the rootfs")
		return
	}
	r.add("javascript in jail", true, fmt.Sprintf("deno %s (v8 %s, typescript %s), wall %d ms", f.Deno, f.V8, f.TypeScript, res.WallMS), "")
	if !f.ReadDenied || !f.EnvDenied || !f.NetDenied || !f.NodeImportDenied {
		r.add("deno permissions in jail", false, fmt.Sprintf("read denied %v, env denied %v, net denied %v, node: import denied %v", f.ReadDenied, f.EnvDenied, f.NetDenied, f.NodeImportDenied), "the Deno launcher must pass no --allow-* flag and the import map")
	} else {
		r.add("deno permissions in jail", true, "file read, env, net and node: imports denied", "")
	}
}
