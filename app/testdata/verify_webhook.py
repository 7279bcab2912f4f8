"""Verifies a webhook delivery with the reference Standard Webhooks library.

Reads {"secret": "whsec_...", "body": "...", "headers": {...}} on stdin and
exits 0 printing the verified payload's type when the signature verifies,
1 with the library's error otherwise. Used by app/webhook_e2e_test.go.
"""
import json
import sys

from standardwebhooks.webhooks import Webhook

req = json.load(sys.stdin)
try:
    payload = Webhook(req["secret"]).verify(req["body"], req["headers"])
except Exception as e:  # the library raises WebhookVerificationError
    print(f"{type(e).__name__}: {e}")
    sys.exit(1)
print(payload["type"])
