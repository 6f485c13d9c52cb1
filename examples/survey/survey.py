#!/usr/bin/env python3
"""Seed 000: a LINE bot survey where users tap an answer button several times.

Every tap arrives as its own webhook, often at the same moment. The bot must save the answer once:
the first tap wins and the others are ignored. Each answer is claimed under the composite key
(scenario, user, node); the claim is atomic, so of any number of simultaneous taps exactly one is
told `claimed: true` and only that one saves and replies.

Two existence checks serve the bot's flow:
  * has this user answered this node?           -> a lookup of (scenario, user, node)
  * has this user answered anything in this scenario? -> a prefix lookup of (scenario, user)
The user comes before the node in the key so that the second question is a prefix, answered from an
index. The three webhook entry points (postback, message, quick reply) share one guard; an admin's
deliberate resend skips it.

Run:  idem serve   (in another terminal)   then   python3 examples/survey/survey.py
"""

import os
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from idem_client import call, expect, require_server  # noqa: E402

NS = "survey_answers"
saved = []
lock = threading.Lock()


def answer_once(entry_point, scenario, user, node, answer):
    """The guard every webhook entry point runs before saving an answer."""
    status, body = call("POST", f"/v1/claims/{NS}", {
        "parts": [scenario, user, node],
        "data": {"answer": answer, "via": entry_point},
    })
    expect(status in (200, 201), f"claim answered {status}: {body}")
    with lock:
        if body["claimed"]:
            saved.append((scenario, user, node, answer))
            print(f"saved answer {answer!r} for {user} at {scenario}/{node} (via {entry_point})")
        else:
            kept = body["data"]["answer"]
            print(f"ignored duplicate tap via {entry_point}: {user} already answered {kept!r}")


def main():
    require_server()
    # A user taps "A" four times at once, through the three entry points.
    taps = [("postback", "A"), ("postback", "A"), ("message", "A"), ("quick_reply", "A")]
    threads = [threading.Thread(target=answer_once, args=(via, "scenario-1", "user-3", "node-2", a)) for via, a in taps]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expect(len(saved) == 1, f"exactly one of four simultaneous taps is saved, got {len(saved)}")

    # A later, different tap on the same node is a duplicate too: the first answer stands.
    answer_once("postback", "scenario-1", "user-3", "node-2", "B")
    expect(len(saved) == 1, "a second answer to the same node is not saved")

    # The same user answering the next node is a new answer.
    answer_once("postback", "scenario-1", "user-3", "node-3", "C")
    expect(len(saved) == 2, "another node is another answer")

    # Existence checks by (scenario, node, user) and by (scenario, user).
    _, found = call("POST", f"/v1/claims/{NS}/lookup", {"items": [
        {"parts": ["scenario-1", "user-3", "node-2"]},
        {"parts": ["scenario-1", "user-4", "node-2"]},
    ]})
    expect([r["exists"] for r in found["results"]] == [True, False], f"node lookups: {found}")
    _, answered = call("POST", f"/v1/claims/{NS}/lookup", {"prefix": ["scenario-1", "user-3"]})
    _, silent = call("POST", f"/v1/claims/{NS}/lookup", {"prefix": ["scenario-1", "user-4"]})
    expect(answered["exists"] and not silent["exists"], "scenario-level checks")
    print("user-3 has answered in scenario-1; user-4 has not")

    # An admin resend is deliberate and goes around the guard.
    print("admin resend of scenario-1/node-2 to user-3: sent without a guard")
    print("ok")


if __name__ == "__main__":
    main()
