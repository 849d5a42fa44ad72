"""An adapter that misbehaves on purpose, for the C++ client's robustness tests (docs/adapter-protocol.md
sections 1 and 7). Standard library only; otherwise it is minimal_adapter.py.

    python3 faulty_adapter.py --fault MODE [--state FILE]

  crash-on-run       exits with status 3 on the first run request, without a reply
  hang               never answers a run request
  garbage            answers a run request with a line that is not JSON
  partial-line       writes half a reply without its newline, then exits (status 0)
  wrong-id           answers a run request with another id
  exit-early         exits (status 0) right after answering hello
  bad-capabilities   answers hello with an impossible capability (world_sizes [0])
  error-reply        answers every run request with an error of kind "failed"
  slow-start         sleeps 3 s before reading the hello
  stdout-noise       prints a line that is not protocol before every reply
  crash-once         exits with status 3 on the first run request ever (remembered by creating --state FILE),
                     and is correct afterwards: for retry tests
"""
import argparse
import json
import os
import sys
import time

import minimal_adapter

FAULTS = ("crash-on-run", "hang", "garbage", "partial-line", "wrong-id", "exit-early", "bad-capabilities",
          "error-reply", "slow-start", "stdout-noise", "crash-once")


def send(line):
    sys.stdout.write(line)
    sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fault", required=True, choices=FAULTS)
    parser.add_argument("--state", help="marker file for crash-once")
    args = parser.parse_args()
    if args.fault == "crash-once" and not args.state:
        parser.error("--fault crash-once needs --state FILE")
    if args.fault == "slow-start":
        time.sleep(3)
    for line in sys.stdin:
        msg = json.loads(line)
        kind = msg.get("type")
        if kind == "hello":
            reply = minimal_adapter.hello(msg)
            if args.fault == "bad-capabilities" and reply["type"] == "hello":
                reply["capabilities"] = dict(reply["capabilities"], world_sizes=[0])
        elif kind == "run":
            if args.fault == "crash-on-run":
                sys.exit(3)
            if args.fault == "crash-once" and not os.path.exists(args.state):
                with open(args.state, "w") as marker:
                    marker.write("crashed once\n")
                sys.exit(3)
            if args.fault == "hang":
                while True:
                    time.sleep(3600)
            if args.fault == "garbage":
                send("this is not JSON {\n")
                continue
            if args.fault == "error-reply":
                reply = {"type": "error", "id": msg["id"], "kind": "failed", "message": "injected failure"}
            else:
                reply = minimal_adapter.run(msg)
            if args.fault == "wrong-id":
                reply["id"] = msg["id"] + 1
            if args.fault == "partial-line":
                text = json.dumps(reply)
                send(text[: len(text) // 2])
                sys.exit(0)
        else:
            break
        if args.fault == "stdout-noise":
            send("loading checkpoint shards: 100%\n")
        send(json.dumps(reply) + "\n")
        if args.fault == "exit-early" and kind == "hello":
            sys.exit(0)


if __name__ == "__main__":
    main()
