"""The soak's ``command`` agent: one process per turn, as an operator's own program would be.

Reads the turn prompt on stdin, appends one JSON line per turn to the log named by its
first argument (the fleet's environment tells it where the turn is), and answers from
a hash of (instance, prompt): a rerun of the same turn after a crash answers the same.
About a third of turns are silent (a few print a silence marker instead), the rest
reply, half of those handing over to a sibling with ``@name`` so bots wake each other.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

BOTS = ("dana", "eli", "fay")


def main() -> None:
    prompt = sys.stdin.read()
    env = os.environ
    instance = env["NANOSLACK_INSTANCE"]
    entry = {
        "instance": instance,
        "channel": env.get("NANOSLACK_CHANNEL", ""),
        "thread_ts": env.get("NANOSLACK_THREAD_TS", ""),
        "sender": env.get("NANOSLACK_SENDER", ""),
        "wrapping_up": env.get("NANOSLACK_WRAPPING_UP", ""),
        "pid": os.getpid(),
        "prompt": prompt,
    }
    with open(sys.argv[1], "a", encoding="utf-8") as log:
        log.write(json.dumps(entry) + "\n")
    h = int(hashlib.sha256(f"{instance}\n{prompt}".encode()).hexdigest()[:12], 16)
    # The item names the prompt (12 hex digits): the test finds each bot message in the
    # prompts of the turns it woke, as it finds alice's.
    roll, item = h % 100, f"{h:012x}"
    others = [b for b in BOTS if b != instance]
    if roll < 30:
        return  # silence
    if roll < 35:
        print("*(silent)*")  # a silence marker: the fleet treats it as silence
    elif roll < 67:
        print(f"{instance} here: item {item} is in hand, details in the tracker.")
    else:
        print(f"@{others[h % len(others)]} could you pick up item {item} next?")


if __name__ == "__main__":
    main()
