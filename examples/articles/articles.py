#!/usr/bin/env python3
"""Seed 002: an RSS-to-Discord article curator that must announce each article once.

Two namespaces keep what the curator has decided, keyed by article URL:
  notified_articles  announced to Discord; forgotten after 90 days
  rejected_articles  judged off-topic; forgotten after 30 days
(the TTLs come from the server's config; see examples/articles/idem.toml).

Each run checks the feed against both namespaces 500 URLs per call, judges what is new, and claims
the announcements in 500-item batches before sending them: the claim is atomic, so even two curators
running at once announce each article once. Store calls retry with backoff on transient errors.

Run:  idem serve --config examples/articles/idem.toml   then   python3 examples/articles/articles.py
"""

import datetime
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from support import call, expect, require_server  # noqa: E402

BATCH = 500
RUN = os.environ.get("RUN_ID") or datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d%H%M%S%f")
FEED = [f"https://news.example.com/{RUN}/article-{i}" for i in range(600)]


def chunks(items, size):
    for i in range(0, len(items), size):
        yield items[i:i + size]


def already_decided(urls):
    """URLs found in either namespace, checked 500 per call."""
    seen = set()
    for ns in ("notified_articles", "rejected_articles"):
        for chunk in chunks(urls, BATCH):
            status, body = call("POST", f"/v1/claims/{ns}/lookup", {"items": [{"key": u} for u in chunk]})
            expect(status == 200, f"lookup answered {status}: {body}")
            seen.update(u for u, r in zip(chunk, body["results"]) if r["exists"])
    return seen


def is_on_topic(url):
    return not url.endswith("0")  # the curator's judgement: every tenth article is off-topic


def claim_all(ns, urls, data):
    """Claims URLs in 500-item batches; returns those this run claimed first."""
    won = []
    for chunk in chunks(urls, BATCH):
        status, body = call("POST", f"/v1/claims/{ns}/batch", {"items": [{"key": u, "data": data} for u in chunk]})
        expect(status == 200, f"batch answered {status}: {body}")
        won.extend(u for u, r in zip(chunk, body["results"]) if r["claimed"])
    return won


def run_once():
    seen = already_decided(FEED)
    new = [u for u in FEED if u not in seen]
    rejected = claim_all("rejected_articles", [u for u in new if not is_on_topic(u)], {"reason": "off-topic"})
    announced = claim_all("notified_articles", [u for u in new if is_on_topic(u)], {"channel": "#news"})
    # Only now would the curator post `announced` to Discord.
    return new, rejected, announced


def require_namespace_ttls():
    """The example needs idem started with examples/articles/idem.toml, which gives the two
    namespaces their TTLs; without it claims never expire. Says so plainly, instead of failing
    later on a missing expiry."""
    probe = f"config-probe-{RUN}"
    status, body = call("POST", "/v1/claims/notified_articles", {"key": probe})
    expect(status in (200, 201), f"probe claim answered {status}: {body}")
    call("DELETE", f"/v1/claims/notified_articles/{body['id']}")
    if body.get("expires_at") is None:
        raise SystemExit(
            "idem is running without this example's config: the namespaces notified_articles and "
            "rejected_articles have no default_ttl. Start it with "
            "`idem serve --config examples/articles/idem.toml` and run this again."
        )


def main():
    require_server("idem serve --config examples/articles/idem.toml")
    require_namespace_ttls()
    new, rejected, announced = run_once()
    print(f"first run: {len(new)} new, {len(rejected)} rejected, announced {len(announced)} new articles")
    expect(len(announced) == 540 and len(rejected) == 60, "first run decides every article")

    # The next poll sees the same feed: nothing is announced twice.
    new, rejected, announced = run_once()
    print(f"second run: {len(new)} new, {len(announced)} announced")
    expect(not new and not announced and not rejected, "second run finds nothing new")

    # Decisions expire on the namespace's schedule.
    _, body = call("POST", "/v1/claims/notified_articles/lookup", {"items": [{"key": FEED[1]}]})
    _, rej = call("POST", "/v1/claims/rejected_articles/lookup", {"items": [{"key": FEED[0]}]})
    for name, record, days in (("notified", body["results"][0]["record"], 90), ("rejected", rej["results"][0]["record"], 30)):
        created = datetime.datetime.fromisoformat(record["created_at"].replace("Z", "+00:00"))
        expires = datetime.datetime.fromisoformat(record["expires_at"].replace("Z", "+00:00"))
        expect(expires - created == datetime.timedelta(days=days), f"{name} TTL is {days} days: {record}")
        print(f"{name} articles expire after {days} days")
    print("ok")


if __name__ == "__main__":
    main()
