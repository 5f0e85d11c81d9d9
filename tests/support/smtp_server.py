"""An SMTP server for the tests (docs/spec.md §13, `notification.channel = email`): Python's
`aiosmtpd` (`pip install aiosmtpd==1.4.6`), an implementation that is not ours.

    python3 smtp_server.py PLAN OUT

PLAN: SMTP replies for successive messages' DATA, comma-separated (`451,250,550`); after
the plan, every message is accepted (`250`). OUT: a file to which each message is appended
as one JSON line: {"answer", "mail_from", "rcpt_tos", "data"}. Prints the port it listens on
(127.0.0.1), then serves until killed.
"""

import json
import socket
import sys
import threading
import time

from aiosmtpd.controller import Controller

PLAN = [int(c) for c in sys.argv[1].split(",") if c]
OUT = sys.argv[2]
LOCK = threading.Lock()


class Handler:
    async def handle_DATA(self, server, session, envelope):
        with LOCK:
            answer = PLAN.pop(0) if PLAN else 250
            with open(OUT, "a", encoding="utf-8") as out:
                out.write(json.dumps({
                    "answer": answer,
                    "mail_from": envelope.mail_from,
                    "rcpt_tos": envelope.rcpt_tos,
                    "data": envelope.content.decode("utf-8", "replace"),
                }) + "\n")
        if answer == 250:
            return "250 OK"
        if answer // 100 == 4:
            return f"{answer} 4.3.0 try again later"
        return f"{answer} 5.1.1 no such mailbox"


with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
controller = Controller(Handler(), hostname="127.0.0.1", port=port)
controller.start()
print(port, flush=True)
while True:
    time.sleep(3600)
