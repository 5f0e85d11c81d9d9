"""A webhook receiver for the tests (docs/spec.md §13): every delivery is verified with the
Standard Webhooks reference library for Python (`pip install standardwebhooks==1.3.0`), once
per configured secret, and recorded; the answers it gives are the test's to choose.

    python3 webhook_receiver.py SECRETS

SECRETS: `whsec_...` keys, comma-separated. Prints the port it listens on (127.0.0.1), then
serves until killed:
- POST anything: a delivery. Answered with the next of the planned answers (`POST /plan`),
  else 200. Recorded: `webhook-id`, which secrets verified it, the body, the answer.
- POST /plan: a JSON list of [status, retry_after_or_null(, delay_seconds)], answered in
  order; status 0 holds the request (recorded at once, answered 200 a minute later, if anyone
  still waits); a delay answers after that many seconds.
- POST /plan/PATH: the same for deliveries to /PATH only (before the shared plan).
- POST /always/PATH: [status, retry_after_or_null(, delay_seconds)] for every delivery to
  /PATH once its plan is spent (`null` forgets it).
- POST /secrets: a JSON list of `whsec_...` keys, replacing those given at the start.
- GET /deliveries: every delivery so far, as a JSON list (with its path, `webhook-timestamp`
  and the verifier's error when none verified).
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook, WebhookVerificationError

SECRETS = [s for s in sys.argv[1].split(",") if s]
LOCK = threading.Lock()
DELIVERIES = []
PLAN = []
PLANS = {}
ALWAYS = {}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _answer(self, status, body=b"", retry_after=None):
        self.send_response(status)
        if retry_after is not None:
            self.send_header("Retry-After", str(retry_after))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        with LOCK:
            body = json.dumps(DELIVERIES).encode()
        self._answer(200, body)

    def _next_answer(self):
        """(status, retry_after, delay) for this delivery; the caller holds LOCK."""
        path = self.path.split("?", 1)[0]
        plan = PLANS.get(path)
        if plan:
            answer = plan.pop(0)
        elif path in ALWAYS:
            answer = ALWAYS[path]
        elif PLAN:
            answer = PLAN.pop(0)
        else:
            answer = [200, None]
        answer = list(answer) + [None] * (3 - len(answer))
        return answer[0], answer[1], answer[2]

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path == "/plan":
            with LOCK:
                PLAN.extend(json.loads(body))
            return self._answer(204)
        if self.path.startswith("/plan/"):
            with LOCK:
                PLANS.setdefault(self.path[len("/plan"):], []).extend(json.loads(body))
            return self._answer(204)
        if self.path.startswith("/always/"):
            answer = json.loads(body)
            with LOCK:
                if answer is None:
                    ALWAYS.pop(self.path[len("/always"):], None)
                else:
                    ALWAYS[self.path[len("/always"):]] = answer
            return self._answer(204)
        if self.path == "/secrets":
            with LOCK:
                SECRETS[:] = json.loads(body)
            return self._answer(204)
        headers = {k: v for k, v in self.headers.items()}
        verified = []
        error = None
        with LOCK:
            secrets = list(SECRETS)
        for i, secret in enumerate(secrets):
            try:
                Webhook(secret).verify(body, headers)
                verified.append(i)
            except WebhookVerificationError as e:
                error = str(e)
        with LOCK:
            status, retry_after, delay = self._next_answer()
            DELIVERIES.append({
                "id": headers.get("webhook-id") or headers.get("Webhook-Id"),
                # Without the query: a URL's token is the sender's to send, not ours to keep.
                "path": self.path.split("?", 1)[0],
                "timestamp": headers.get("webhook-timestamp") or headers.get("Webhook-Timestamp"),
                "verified": verified,
                "error": None if verified else error,
                "signatures": len((headers.get("webhook-signature") or headers.get("Webhook-Signature") or "").split(" ")),
                "body": json.loads(body) if body else None,
                "answer": status,
            })
        if delay:
            time.sleep(delay)
        if status == 0:
            time.sleep(60)
            status = 200
        try:
            self._answer(status, body=("answered %d " % status).encode() + b"x" * 5000, retry_after=retry_after)
        except OSError:
            pass  # the sender is gone (killed while we held it)


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
