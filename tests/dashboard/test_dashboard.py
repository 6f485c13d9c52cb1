"""The dashboard in a real headless Chromium against a real `idem serve` with auth on (contract
§7): the token prompt and nothing else without it; a dead receipt found by its event id, opened,
replayed against a handler that now succeeds, and shown completed; a bulk replay of 200 dead
receipts by filter, counted first; a discard; a prefix's claims listed, counted, and deleted only
once confirmed (cancel deletes nothing); the token never in a URL or the log; a phone-width page
that does not scroll sideways; and a read-only token that sees every page and no action
(docs/security.md).

With `DASHBOARD_SCREENSHOTS=<dir>` it also saves the screenshots of docs/dashboard.md there
(`DASHBOARD_SCREENSHOTS=docs/screenshots`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, TypeVar

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select

from conftest import TOKEN, VIEWER_TOKEN, Handler, Idem

T = TypeVar("T")


def until(what: str, check: Callable[[], T], timeout: float = 20) -> T:
    """Polls `check` until it returns something truthy (errors count as not yet)."""
    deadline = time.time() + timeout
    last: object = None
    while time.time() < deadline:
        try:
            value = check()
            if value:
                return value
            last = value
        except Exception as e:  # noqa: BLE001 - a page being swapped raises stale-element errors
            last = e
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def by_testid(driver: WebDriver, name: str) -> WebElement:
    return until(f"[data-testid={name}]", lambda: driver.find_element(By.CSS_SELECTOR, f'[data-testid="{name}"]'))


def click(driver: WebDriver, name: str) -> None:
    until(f"{name} clickable", lambda: by_testid(driver, name).is_enabled())
    by_testid(driver, name).click()


def no_token_in_url(driver: WebDriver) -> None:
    assert TOKEN not in driver.current_url and VIEWER_TOKEN not in driver.current_url


def sign_in(driver: WebDriver, idem: Idem, path: str = "/ui", token: str = TOKEN) -> None:
    driver.get(idem.url + path)
    by_testid(driver, "token-input").send_keys(token)
    click(driver, "token-submit")
    until("the page behind the prompt", lambda: not driver.find_elements(By.CSS_SELECTOR, "[data-testid=token-input]"))
    no_token_in_url(driver)


def screenshot(driver: WebDriver, name: str) -> None:
    folder = os.environ.get("DASHBOARD_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(folder) / name))


def test_without_a_token_only_the_prompt_is_served(idem: Idem, browser: WebDriver) -> None:
    receipt = idem.send_event("bulk", "secret-event", note="not for strangers")
    for path in ("/ui", "/ui/receipts", f"/ui/receipts/{receipt}"):
        browser.get(idem.url + path)
        by_testid(browser, "token-input")
        page = browser.page_source
        assert "secret-event" not in page and receipt not in page and "Receipts</h1>" not in page, path
    by_testid(browser, "token-input").send_keys("wrong-token")
    click(browser, "token-submit")
    until("the rejection", lambda: "not accepted" in browser.page_source)
    by_testid(browser, "token-input").send_keys(TOKEN)
    click(browser, "token-submit")
    until("the receipt behind the prompt", lambda: "secret-event" in by_testid(browser, "receipt-status").find_element(By.XPATH, "..").text)
    no_token_in_url(browser)


def test_a_dead_receipt_is_found_opened_replayed_and_completes(idem: Idem, handler: Handler, browser: WebDriver) -> None:
    for i in range(5):
        idem.send_event("partner", f"evt-other-{i}", amount=i)
    receipt = idem.send_event("partner", "evt-find-me", amount=42, customer={"id": "cus_9", "name": "Aiko"})
    idem.wait_for("source=partner&status=dead", 6)
    idem.send_event("bulk", "evt-unrelated")

    sign_in(browser, idem)
    by_testid(browser, "dead-letters")
    screenshot(browser, "overview.png")
    browser.find_element(By.LINK_TEXT, "Receipts").click()
    by_testid(browser, "search-input").send_keys("evt-find-me")
    click(browser, "search-submit")
    rows = until(
        "one row for evt-find-me",
        lambda: (r := browser.find_elements(By.CSS_SELECTOR, '[data-testid="receipt-row"]')) and len(r) == 1 and r,
    )
    assert rows[0].get_attribute("data-receipt-id") == receipt
    assert "evt-find-me" in browser.current_url, "the filter is in the URL: a permalink"
    rows[0].find_element(By.LINK_TEXT, "evt-find-me").click()
    status = until("the receipt page", lambda: by_testid(browser, "receipt-status").text)
    assert "dead" in status
    assert browser.current_url.endswith(f"/ui/receipts/{receipt}")
    body = by_testid(browser, "event-body").text
    assert '"amount": 42' in body and '"name": "Aiko"' in body, body
    assert "HTTP 500" in browser.find_element(By.CSS_SELECTOR, '[data-testid="attempt"]').text

    handler.succeed = True
    click(browser, "replay")
    until("completed after the replay", lambda: "completed" in by_testid(browser, "receipt-status").text)
    assert receipt in handler.ids, "the handler got it again, with webhook-id = the receipt id"
    # Every round's attempts, oldest first, each saying its round: round 1's failure stays, round 2 delivered.
    timeline = until("round 2's attempt", lambda: (a := browser.find_elements(By.CSS_SELECTOR, '[data-testid="attempt"]')) and len(a) >= 2 and a)
    assert [a.get_attribute("data-round") for a in timeline] == ["1", "2"]
    assert "Round 1" in timeline[0].text and "HTTP 500" in timeline[0].text, timeline[0].text
    assert "Round 2" in timeline[1].text and "HTTP 200" in timeline[1].text, timeline[1].text
    _, api = idem.api("GET", f"/v1/receipts/{receipt}")
    assert (api["status"], api["round"]) == ("completed", 2)
    screenshot(browser, "receipt.png")

    # A permalink opened afresh in the same browser shows the receipt (the token is kept).
    browser.get(idem.url + f"/ui/receipts/{receipt}")
    until("the permalink", lambda: "completed" in by_testid(browser, "receipt-status").text)
    no_token_in_url(browser)


def test_bulk_replay_of_200_dead_receipts_counts_first_then_replays_them_all(
    idem: Idem, browser: WebDriver
) -> None:
    for i in range(200):
        idem.send_event("bulk", f"bulk-{i}", n=i)
    idem.send_event("partner", "not-in-the-filter")
    idem.wait_for("source=bulk&status=dead", 200)
    idem.wait_for("source=partner&status=dead", 1)

    sign_in(browser, idem, "/ui/replay")
    Select(by_testid(browser, "bulk-source")).select_by_visible_text("bulk")
    click(browser, "bulk-count")
    matching = until("the count", lambda: by_testid(browser, "bulk-matching").get_attribute("data-count"))
    assert matching == "200", "the count comes first"
    assert idem.wait_for("source=bulk&status=dead", 200), "counting changed nothing"
    click(browser, "bulk-confirm")
    done = until("the result", lambda: by_testid(browser, "bulk-result").get_attribute("data-count"))
    assert done == "200"
    receipts = until(
        "all 200 delivered again and dead again",
        lambda: (r := idem.wait_for("source=bulk&status=dead", 200)) and all(x["round"] == 2 for x in r) and r,
        timeout=60,
    )
    assert len(receipts) == 200
    other = idem.wait_for("source=partner", 1)
    assert other[0]["round"] == 1, "receipts outside the filter are left alone"


def test_a_dead_receipt_is_discarded(idem: Idem, browser: WebDriver) -> None:
    receipt = idem.send_event("bulk", "evt-discard-me")
    idem.wait_for("source=bulk&status=dead", 1)
    sign_in(browser, idem, f"/ui/receipts/{receipt}")
    until("dead", lambda: "dead" in by_testid(browser, "receipt-status").text)
    click(browser, "discard")
    until("discarded", lambda: "discarded" in by_testid(browser, "receipt-status").text)
    _, api = idem.api("GET", f"/v1/receipts/{receipt}")
    assert api["status"] == "discarded"
    _, count = idem.api("POST", "/v1/receipts/replay", {"dry_run": True})
    assert count == {"matching": 0}, "no dead letters left"
    assert by_testid(browser, "replay").is_enabled(), "a discarded receipt can still be replayed"
    assert not by_testid(browser, "discard").is_enabled()


def test_a_scenarios_answers_are_listed_page_by_page_and_deleted(idem: Idem, browser: WebDriver) -> None:
    """A survey admin lists a scenario's answers on the lookup page and resets the scenario."""
    items = [{"parts": ["scenario-7", f"user-{u:03}", "node-1"], "data": {"answer": "A"}} for u in range(60)]
    items.append({"parts": ["scenario-70", "user-001", "node-1"]})
    status, _ = idem.api("POST", "/v1/claims/survey/batch", {"items": items})
    assert status == 200
    sign_in(browser, idem, "/ui/lookup")
    by_testid(browser, "lookup-ns").send_keys("survey")
    by_testid(browser, "lookup-key").send_keys("scenario-7")
    browser.find_element(By.CSS_SELECTOR, 'input[name="prefix"]').click()
    click(browser, "lookup-submit")
    rows = until("the first page", lambda: browser.find_elements(By.CSS_SELECTOR, '[data-testid="claim-row"]'))
    assert len(rows) == 50
    assert rows[0].text.startswith("scenario-7 / user-000 / node-1"), rows[0].text
    assert "scenario-70" not in browser.page_source, "another prefix"
    screenshot(browser, "lookup-prefix.png")
    click(browser, "claims-next")
    until("the second page", lambda: len(browser.find_elements(By.CSS_SELECTOR, '[data-testid="claim-row"]')) == 10)
    last = browser.find_elements(By.CSS_SELECTOR, '[data-testid="claim-row"]')[-1]
    assert last.text.startswith("scenario-7 / user-059"), last.text
    assert not browser.find_elements(By.CSS_SELECTOR, '[data-testid="claims-next"]'), "the last page"
    click(browser, "prefix-delete")
    counted = until("the count", lambda: by_testid(browser, "prefix-matching").get_attribute("data-count"))
    assert counted == "60", "every claim under the prefix is counted, not the page shown"
    click(browser, "prefix-confirm")
    until("deleted", lambda: "Deleted 60 claims under scenario-7" in browser.page_source)
    status, page = idem.api("GET", "/v1/claims/survey?prefix=scenario-7")
    assert (status, page) == (200, {"items": [], "next": None})
    status, page = idem.api("GET", "/v1/claims/survey?prefix=scenario-70")
    assert len(page["items"]) == 1, "the other scenario is untouched"


def claims_under(idem: Idem, ns: str, *prefix: str) -> list:
    query = "&".join(f"prefix={p}" for p in prefix)
    status, page = idem.api("GET", f"/v1/claims/{ns}?limit=1000&{query}")
    assert status == 200, page
    return [item["parts"] for item in page["items"]]


def test_a_prefix_delete_counts_asks_and_cancel_deletes_nothing(idem: Idem, browser: WebDriver) -> None:
    """Issue #43: the delete under a listing counts first and asks, showing the count and the
    prefix; cancel deletes nothing; confirmed, every claim under the prefix goes and no other."""
    items = [{"parts": ["import-3", f"row-{i}"]} for i in range(7)]
    items += [{"parts": ["import-30", "row-0"]}, {"parts": ["import-4", "row-0"]}, {"parts": ["import-3"]}]
    status, _ = idem.api("POST", "/v1/claims/ledger/batch", {"items": items})
    assert status == 200
    sign_in(browser, idem, "/ui/lookup?kind=claim&ns=ledger&key=import-3&prefix=1")
    until("the listing", lambda: len(browser.find_elements(By.CSS_SELECTOR, '[data-testid="claim-row"]')) == 8)

    click(browser, "prefix-delete")
    matching = by_testid(browser, "prefix-matching")
    until("the count", lambda: matching.get_attribute("data-count") == "8")
    assert matching.get_attribute("data-at-least") is None
    assert "8 live claim(s) in ledger under import-3 would be deleted" in matching.text, matching.text
    assert "Delete 8 claim(s)" in by_testid(browser, "prefix-confirm").text
    assert len(claims_under(idem, "ledger", "import-3")) == 8, "counting deleted nothing"

    click(browser, "prefix-cancel")
    until("the listing again", lambda: len(browser.find_elements(By.CSS_SELECTOR, '[data-testid="claim-row"]')) == 8)
    assert not browser.find_elements(By.CSS_SELECTOR, '[data-testid="prefix-confirm"]')
    assert len(claims_under(idem, "ledger", "import-3")) == 8, "cancel deleted nothing"

    click(browser, "prefix-delete")
    until("the count again", lambda: by_testid(browser, "prefix-matching").get_attribute("data-count") == "8")
    click(browser, "prefix-confirm")
    until("deleted", lambda: "Deleted 8 claims under import-3" in by_testid(browser, "notice").text)
    assert claims_under(idem, "ledger", "import-3") == []
    assert claims_under(idem, "ledger", "import-30") == [["import-30", "row-0"]], "another prefix is kept"
    assert claims_under(idem, "ledger", "import-4") == [["import-4", "row-0"]], "another prefix is kept"
    no_token_in_url(browser)


def test_a_prefix_delete_past_the_count_cap_says_at_least(idem: Idem, browser: WebDriver) -> None:
    """Counting stops at 10,000 claims (bounded work per click); the confirmation then says "at
    least", and the delete still deletes every claim under the prefix."""
    for batch in range(2):
        items = [{"parts": ["bulk-load", f"row-{batch}-{i:05}"]} for i in range(5001)]
        status, _ = idem.api("POST", "/v1/claims/ledger/batch", {"items": items})
        assert status == 200
    idem.api("POST", "/v1/claims/ledger", {"parts": ["bulk-loader", "kept"]})
    sign_in(browser, idem, "/ui/lookup?kind=claim&ns=ledger&key=bulk-load&prefix=1&count=1")
    matching = by_testid(browser, "prefix-matching")
    assert (matching.get_attribute("data-count"), matching.get_attribute("data-at-least")) == ("10000", "1")
    assert "at least 10,000 live claim(s) in ledger under bulk-load" in matching.text, matching.text
    click(browser, "prefix-confirm")
    until("deleted", lambda: "Deleted 10002 claims under bulk-load" in by_testid(browser, "notice").text, timeout=60)
    assert claims_under(idem, "ledger", "bulk-load") == []
    assert claims_under(idem, "ledger", "bulk-loader") == [["bulk-loader", "kept"]]


def test_live_refresh_shows_new_receipts_and_pauses(idem: Idem, browser: WebDriver) -> None:
    sign_in(browser, idem, "/ui/receipts")
    until("the empty state", lambda: "No receipts yet" in browser.page_source)
    browser.find_element(By.CSS_SELECTOR, "[data-pause]").click()
    idem.send_event("bulk", "evt-while-paused")
    time.sleep(6.5)
    assert not browser.find_elements(By.CSS_SELECTOR, '[data-testid="receipt-row"]'), "paused: nothing moves"
    browser.find_element(By.CSS_SELECTOR, "[data-pause]").click()
    until("the new receipt, live", lambda: browser.find_elements(By.CSS_SELECTOR, '[data-testid="receipt-row"]'), timeout=12)


def test_pages_fit_a_phone(idem: Idem, browser: WebDriver) -> None:
    receipt = idem.send_event("partner", "evt-phone", text="a fairly long field " * 8)
    idem.wait_for("source=partner&status=dead", 1)
    browser.set_window_size(390, 844)
    sign_in(browser, idem, "/ui")
    for path in ("/ui", "/ui/receipts", f"/ui/receipts/{receipt}", "/ui/replay", "/ui/lookup"):
        browser.get(idem.url + path)
        until(path, lambda: browser.find_elements(By.CSS_SELECTOR, "main h1"))
        overflow = browser.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1, f"{path} scrolls sideways by {overflow}px on a phone"
        if path.startswith("/ui/receipts/"):
            screenshot(browser, "receipt-phone.png")


def test_a_read_token_sees_every_page_and_no_action(idem: Idem, browser: WebDriver) -> None:
    receipt = idem.send_event("bulk", "evt-viewer")
    idem.wait_for("source=bulk&status=dead", 1)
    status, _ = idem.api("POST", "/v1/claims/orders", {"key": "o-1"})
    assert status == 201
    sign_in(browser, idem, "/ui", token=VIEWER_TOKEN)
    assert "dash-viewer (read)" in by_testid(browser, "signed-in-as").text
    pages = {
        "/ui": "dead-letters",
        "/ui/receipts": "receipt-row",
        f"/ui/receipts/{receipt}": "receipt-status",
        "/ui/replay?status=dead&count=1": "bulk-matching",
        "/ui/lookup?kind=claim&ns=orders&key=o-1": "lookup-result",
        "/ui/lookup?kind=claim&ns=orders&key=o-1&prefix=1": "lookup-result",
        "/ui/lookup?kind=claim&ns=orders&key=o-1&prefix=1&count=1": "prefix-matching",
    }
    for path, shown in pages.items():
        browser.get(idem.url + path)
        seen = by_testid(browser, shown)
        if shown in ("bulk-matching", "prefix-matching"):
            assert seen.get_attribute("data-count") == "1", "a viewer may count"
        for action in ("replay", "discard", "bulk-confirm", "lookup-delete", "prefix-delete", "prefix-confirm"):
            assert not browser.find_elements(By.CSS_SELECTOR, f'[data-testid="{action}"]'), f"{path}: no {action} button"
    # The action itself, sent as the dashboard's script would, is refused and changes nothing.
    status = browser.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        fetch(arguments[0], {method: "POST", body: "", headers: {
            "idem-ui": "1", "content-type": "application/x-www-form-urlencoded",
            "authorization": "Bearer " + localStorage.getItem("idem-token")}})
          .then((r) => done(r.status), (e) => done(String(e)));
        """,
        f"/ui/receipts/{receipt}/replay",
    )
    assert status == 403
    _, api = idem.api("GET", f"/v1/receipts/{receipt}")
    assert (api["status"], api["round"]) == ("dead", 1), "nothing changed"
    no_token_in_url(browser)
