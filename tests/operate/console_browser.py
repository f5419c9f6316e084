#!/usr/bin/python3
"""Drives floodgate's web console in Debian's headless Chromium through chromedriver.

Run by tests/operate/console.rs against a running floodgate with two restricted keys (one
of them, --incident, with held messages). It reads what a user would see, clicks what a user would click, and prints one
JSON object of facts on its last line of stdout; the Rust test judges them. Every wait is
bounded. Usage:

  console_browser.py --base http://127.0.0.1:PORT --token TOKEN --release ID --delete ID
                     --incident KEY --shots DIR [--chromium PATH] [--chromedriver PATH]

With --scenario incident (and --campaign ID) it plays the issue's scene instead: the
overview's first screen, the incident page's first screen, one campaign entry, all held
mail matching a filter deleted at once after a refused release, the campaign's actions,
the history after the restriction ends, and every page at 390 px (width, tap targets).
"""

import argparse
import json
import shutil
import sys
import tempfile
import time
import traceback

from selenium import webdriver
from selenium.common.exceptions import (
    StaleElementReferenceException,
    TimeoutException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1100,900",
    "--force-device-scale-factor=1",
]
WAIT = 20  # seconds, for any one thing to appear


def browser(args, profile, javascript):
    o = webdriver.ChromeOptions()
    o.binary_location = args.chromium
    for f in FLAGS:
        o.add_argument(f)
    o.add_argument("--user-data-dir=" + profile)
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    if not javascript:
        o.add_experimental_option(
            "prefs", {"profile.managed_default_content_settings.javascript": 2}
        )
    service = Service(args.chromedriver, log_path=profile + "/chromedriver.log")
    d = webdriver.Chrome(service=service, options=o)
    d.set_page_load_timeout(WAIT)
    return d


def problems(d):
    """Console messages of the page at warning level or above (script errors, CSP)."""
    return [
        e.get("message", "")
        for e in d.get_log("browser")
        if e.get("level") in ("SEVERE", "WARNING")
    ]


def login(d, base, token):
    d.get(base + "/console/login")
    d.find_element(By.ID, "token").send_keys(token)
    d.find_element(By.CSS_SELECTOR, "form[action='/console/login'] button").click()
    WebDriverWait(d, WAIT).until(lambda d: d.current_url.endswith("/console/"))


def look(d, base, path):
    d.get(base + path)
    WebDriverWait(d, WAIT).until(lambda d: d.find_elements(By.TAG_NAME, "h1"))
    return {
        "h1": d.find_element(By.TAG_NAME, "h1").text,
        "charts": len(d.find_elements(By.CSS_SELECTOR, "svg.chart")),
        "lines": len(d.find_elements(By.CSS_SELECTOR, "svg.chart polyline")),
        "rows": len(d.find_elements(By.CSS_SELECTOR, "tr[data-row]")),
        "buttons": len(d.find_elements(By.CSS_SELECTOR, "button.act")),
        "text": d.find_element(By.TAG_NAME, "main").text[:4000],
        "problems": problems(d),
    }


def click_twice(d, row, verb):
    """Arms, then fires, the row's button whose action ends with /VERB."""
    b = row.find_element(By.CSS_SELECTOR, "button.act[data-action*='/held/%s?']" % verb)
    b.click()
    WebDriverWait(d, WAIT).until(lambda d: "armed" in b.get_attribute("class"))
    b.click()


def status_after(d, old):
    def changed(d):
        s = d.find_element(By.ID, "status")
        return s.text if s.text and s.text != old else None

    return WebDriverWait(d, WAIT).until(changed)


PAGES = [
    ("overview", "/console/"),
    ("top", "/console/top"),
    ("restricted", "/console/restricted"),
    ("held", "/console/held"),
]


def fits(d):
    """Whether the page scrolls sideways: its width against the window's."""
    return d.execute_script(
        "return [document.documentElement.scrollWidth, window.innerWidth];"
    )


def stale(e):
    """Whether a WebDriver error says the element belongs to a page no longer shown.
    Chromium says so in two ways: the standard stale-element error, or, while the next
    page is being put in place, an inspector error naming a node of another document."""
    if isinstance(e, StaleElementReferenceException):
        return True
    return isinstance(e, WebDriverException) and "does not belong to the document" in str(e)


def left(page):
    """A wait condition: the element `page` (the old page's root) is gone."""

    def gone(_d):
        try:
            page.is_enabled()
            return False
        except WebDriverException as e:
            if stale(e):
                return True
            raise

    return gone


def submit(d, button):
    """Clicks `button`, which leads to another page, and waits until the old page is gone
    (it may show an earlier result). A click answered with the stale-page error has already
    left the page; one that did nothing fails the wait."""
    page = d.find_element(By.TAG_NAME, "html")
    try:
        button.click()
    except WebDriverException as e:
        if not stale(e):
            raise
    WebDriverWait(d, WAIT).until(left(page))


def done_text(d):
    """The result text of the page an action led to (read from the element the wait found,
    so a page that is replaced meanwhile cannot leave nothing to read)."""

    def result(d):
        found = d.find_elements(By.ID, "done") or d.find_elements(By.ID, "failed")
        if not found:
            return False
        try:
            return found[0].text or False
        except WebDriverException as e:
            if stale(e):
                return False
            raise

    return WebDriverWait(d, WAIT).until(result)


def submit_form(d, form_id, reason):
    """Submits a form with `reason`; the result text of the page it leads to (the old page
    gone first: it may show an earlier result)."""
    f = d.find_element(By.ID, form_id)
    f.find_element(By.NAME, "reason").send_keys(reason)
    submit(d, f.find_element(By.CSS_SELECTOR, "button[type='submit']"))
    return done_text(d)


def release_selection(d, ids, reason, confirm):
    """Ticks `ids` in the Held page's selection and releases them with `reason` (None: an
    empty field, sent as it is), the box "release though restricted" ticked or not; the
    page's result text."""
    # A refused action comes back with the ticks and the reason kept: tick what is not.
    for i in ids:
        box = d.find_element(By.CSS_SELECTOR, "#selection input[name='id'][value='%s']" % i)
        if not box.is_selected():
            box.click()
    form = d.find_element(By.ID, "selection")
    field = form.find_element(By.NAME, "reason")
    field.clear()
    if reason is None:
        d.execute_script("arguments[0].removeAttribute('required');", field)
    else:
        field.send_keys(reason)
    box = form.find_element(By.CSS_SELECTOR, "input[name='confirm'][value='true']")
    if box.is_selected() != confirm:
        box.click()
    submit(d, form.find_element(By.CSS_SELECTOR, "button[name='op'][value='release']"))
    return done_text(d)


def incident(args, d, facts):
    """The incident flow: the key's page, its held mail filtered, two released by the
    selection (refused without a reason, and without the box "release though restricted"
    ticked), the rest deleted and the restriction ended from the incident page."""
    key = args.incident
    info = look(d, args.base, "/console/key/" + key)
    info["sections"] = {
        s: len(d.find_elements(By.ID, s))
        for s in ["restriction", "evidence", "key-held", "transactions", "readings"]
    }
    info["forms"] = len(d.find_elements(By.CSS_SELECTOR, "form.act-form"))
    facts["incident_page"] = info
    # Held, filtered by the key by the GET form.
    d.get(args.base + "/console/held")
    f = d.find_element(By.ID, "filters")
    f.find_element(By.NAME, "key").send_keys(key)
    submit(d, f.find_element(By.CSS_SELECTOR, "button[type='submit']"))
    WebDriverWait(d, WAIT).until(lambda d: d.find_elements(By.ID, "held-match"))
    facts["filtered"] = {
        "match": d.find_element(By.ID, "held-match").text,
        "rows": len(d.find_elements(By.CSS_SELECTOR, "tr[data-row]")),
        "url": d.current_url,
    }
    boxes = d.find_elements(By.CSS_SELECTOR, "#selection input[type='checkbox'][name='id']")
    picked = [b.get_attribute("value") for b in boxes[:2]]
    facts["bulk_released"] = picked
    # Without a reason (the field's `required` taken away, as a hand-made request would):
    # refused by the server, its words on the page.
    facts["bulk_no_reason"] = release_selection(d, picked, None, False)
    # With a reason, but alice is still restricted: refused until the box is ticked.
    facts["bulk_restricted"] = release_selection(d, picked, "checked by hand", False)
    facts["bulk_done"] = release_selection(d, picked, "checked by hand", True)
    facts["bulk_url"] = d.current_url
    facts["after_bulk_rows"] = len(d.find_elements(By.CSS_SELECTOR, "tr[data-row]"))
    # The incident page: delete the rest, end the restriction.
    d.get(args.base + "/console/key/" + key)
    facts["incident_delete"] = submit_form(d, "act-delete-held", "spam")
    facts["incident_release"] = submit_form(d, "act-release", "password reset")
    facts["incident_problems"] = problems(d)


def phone_and_desktop(args, d, facts, held_id):
    """Screenshots of every page at 1400x1000 and 390x844, and the width check at 390."""
    pages = PAGES + [
        ("incident", "/console/key/" + args.incident),
        ("message", "/console/held/" + held_id),
    ]
    widths = {}
    for size, suffix in [((1400, 1000), ""), ((390, 844), "-phone")]:
        d.set_window_size(*size)
        for name, path in pages:
            d.get(args.base + path)
            WebDriverWait(d, WAIT).until(lambda d: d.find_elements(By.TAG_NAME, "h1"))
            if suffix:
                w = fits(d)
                buttons = d.execute_script(
                    "return Array.from(document.querySelectorAll('button')).filter("
                    "b => b.offsetParent !== null).every(b => {"
                    "const r = b.getBoundingClientRect();"
                    "return r.left >= 0 && r.right <= window.innerWidth; });"
                )
                widths[name] = {"scroll": w[0], "inner": w[1], "buttons_in_view": buttons}
            d.save_screenshot("%s/console-%s%s.png" % (args.shots, name, suffix))
    facts["phone"] = widths


def with_script(args, facts):
    profile = tempfile.mkdtemp(prefix="fg-chromium-")
    d = browser(args, profile, True)
    try:
        # Without the token: the login form, and nothing else.
        d.get(args.base + "/console/held")
        src = d.page_source
        facts["anonymous"] = {
            "title": d.title,
            "login_form": len(d.find_elements(By.ID, "token")),
            "shows_held": args.release in src or args.delete in src,
            "shows_key": "alice" in src,
        }
        # A wrong token: still nothing.
        d.get(args.base + "/console/login")
        d.find_element(By.ID, "token").send_keys("not-the-token-0123456789")
        d.find_element(By.CSS_SELECTOR, "form[action='/console/login'] button").click()
        WebDriverWait(d, WAIT).until(lambda d: d.find_elements(By.ID, "login-error"))
        facts["wrong_token"] = d.find_element(By.ID, "login-error").text
        # The page says how long this address now waits before its next token is looked
        # at; a user types the right one after that.
        wait = d.find_element(By.ID, "login-wait").get_attribute("data-seconds")
        facts["login_wait"] = int(wait)
        problems(d)  # the 401 itself is logged as a failed resource: not a page error
        time.sleep(min(int(wait), 5))
        login(d, args.base, args.token)
        pages = {}
        for name, path in [
            ("overview", "/console/"),
            ("top", "/console/top"),
            ("restricted", "/console/restricted"),
            ("held", "/console/held"),
            ("key", "/console/key?k=alice"),
        ]:
            pages[name] = look(d, args.base, path)
            if name in ("overview", "held"):
                d.save_screenshot("%s/console-%s.png" % (args.shots, name))
        facts["pages"] = pages

        # Release one held message and delete the other, by their buttons.
        look(d, args.base, "/console/held")
        # Its key is restricted: the first release is refused and the confirm box shows;
        # ticked, the second goes ahead.
        row = d.find_element(By.CSS_SELECTOR, "tr[data-id='%s']" % args.release)
        row.find_element(By.CSS_SELECTOR, "input.reason").send_keys("checked in the browser")
        click_twice(d, row, "release")
        facts["release_refused"] = status_after(d, "")
        # The 409 is logged by the browser as a failed resource: kept apart from the
        # problems of the actions that follow.
        facts["release_refused_problems"] = problems(d)
        box = row.find_element(By.CSS_SELECTOR, "label.confirm")
        WebDriverWait(d, WAIT).until(lambda d: box.is_displayed())
        facts["confirm_shown"] = box.is_displayed()
        box.find_element(By.CSS_SELECTOR, "input.confirm").click()
        click_twice(d, row, "release")
        facts["release_status"] = status_after(d, facts["release_refused"])
        row = d.find_element(By.CSS_SELECTOR, "tr[data-id='%s']" % args.delete)
        row.find_element(By.CSS_SELECTOR, "input.reason").send_keys("duplicate")
        click_twice(d, row, "delete")
        facts["delete_status"] = status_after(d, facts["release_status"])
        facts["after_actions_problems"] = problems(d)
        facts["held_after"] = look(d, args.base, "/console/held?key=" + args.incident)
        # A message page to photograph, before the incident flow empties the spool.
        held_id = d.find_element(By.CSS_SELECTOR, "tr[data-id]").get_attribute("data-id")
        phone_and_desktop(args, d, facts, held_id)
        d.set_window_size(1100, 900)
        incident(args, d, facts)
    finally:
        d.quit()
        shutil.rmtree(profile, ignore_errors=True)


def without_script(args, facts):
    """Every read-only page with scripting off: logged in by the plain form."""
    profile = tempfile.mkdtemp(prefix="fg-chromium-noscript-")
    d = browser(args, profile, False)
    try:
        login(d, args.base, args.token)
        seen = {}
        for name, path in [
            ("overview", "/console/"),
            ("top", "/console/top"),
            ("restricted", "/console/restricted"),
            ("held", "/console/held"),
            ("key", "/console/key?k=alice"),
        ]:
            d.get(args.base + path)
            src = d.page_source
            seen[name] = {
                "h1": "<h1>" in src,
                "charts": src.count('<svg class="chart"'),
                "noscript_note": "need JavaScript" in src,
                "length": len(src),
            }
        facts["noscript"] = seen
    finally:
        d.quit()
        shutil.rmtree(profile, ignore_errors=True)


def in_first_screen(d, css):
    """Whether the element `css` finds is visible within the window's first screen."""
    return d.execute_script(
        "const e = document.querySelector(arguments[0]); if (!e) return false;"
        "const r = e.getBoundingClientRect();"
        "return r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight;",
        css,
    )


# What a tap can land on; each must be at least 44 px tall on a phone.
TARGETS = (
    "main a, header a, button, select, summary, "
    "input:not([type=hidden]):not([hidden])"
)


def tap_targets(d):
    """The visible tap targets of the page and those under 44 px tall."""
    return d.execute_script(
        "const out = {n: 0, small: []};"
        "document.querySelectorAll(arguments[0]).forEach(e => {"
        " if (e.offsetParent === null) return;"
        " const r = e.getBoundingClientRect(); if (r.width === 0) return;"
        " out.n++;"
        " if (r.height < 44) out.small.push(e.tagName + ' ' + (e.textContent || e.name || "
        "  e.type).trim().slice(0, 30) + ' ' + Math.round(r.height));"
        "});"
        "return out;",
        TARGETS,
    )


def submit_in(d, form_css, reason, tick=None):
    """Fills the reason of the form `form_css` (cleared first), ticks `tick` inside it when
    given, submits it; the result text of the page it leads to."""
    f = d.find_element(By.CSS_SELECTOR, form_css)
    field = f.find_element(By.NAME, "reason")
    field.clear()
    field.send_keys(reason)
    if tick:
        box = f.find_element(By.CSS_SELECTOR, tick)
        if not box.is_selected():
            box.click()
    submit(d, f.find_element(By.CSS_SELECTOR, "button[type='submit']"))
    return done_text(d)


def held_bulk(d, op, reason, scope, confirm):
    """The Held page's selection form: `reason` (cleared first), the scope radio, the box
    "release though restricted", then the top button `op`; the result text."""
    form = d.find_element(By.ID, "selection")
    field = form.find_element(By.NAME, "reason")
    field.clear()
    field.send_keys(reason)
    form.find_element(By.CSS_SELECTOR, "input[name='scope'][value='%s']" % scope).click()
    box = form.find_element(By.CSS_SELECTOR, "input[name='confirm'][value='true']")
    if box.is_selected() != confirm:
        box.click()
    submit(d, form.find_element(By.CSS_SELECTOR, "#bulk-top button[name='op'][value='%s']" % op))
    return done_text(d)


def incident_scene(args, d, facts):
    """The issue's scene (see the module's doc)."""
    key, camp = args.incident, args.campaign
    key_href = "/console/key/" + key
    d.set_window_size(1400, 1000)
    d.get(args.base + "/console/")
    WebDriverWait(d, WAIT).until(lambda d: d.find_elements(By.ID, "needs"))
    facts["overview"] = {
        "key_link_in_first_screen": in_first_screen(d, "#needs a[href='%s']" % key_href),
        "campaign_link_in_first_screen": in_first_screen(
            d, "#needs a[href^='/console/campaigns?c=']"
        ),
        "problems": problems(d),
    }
    d.get(args.base + key_href)
    WebDriverWait(d, WAIT).until(lambda d: d.find_elements(By.ID, "sum-held"))
    parts = ["sum-who", "sum-since", "sum-why", "sum-delivered", "sum-held", "actions"]
    facts["incident"] = {
        "first_screen": {p: in_first_screen(d, "#" + p) for p in parts},
        "held": d.find_element(By.ID, "sum-held").text,
        "problems": problems(d),
    }
    d.get(args.base + "/console/campaigns")
    facts["campaigns"] = {
        "entries": len(d.find_elements(By.CSS_SELECTOR, "section.campaign")),
    }
    d.get(args.base + "/console/top")
    facts["top"] = {
        "campaign_rows": len(
            d.find_elements(By.CSS_SELECTOR, "#top a[href^='/console/campaigns?c=']")
        ),
    }
    shots_at(args, d, "", key)
    # The phone's pages while there is mail held (measured again at the end).
    facts["phone_during"] = shots_at(args, d, "-phone", key)
    # Held, filtered by the key; all matching released without the box: refused, kept.
    d.get(args.base + "/console/held?key=" + key)
    held = {"match": d.find_element(By.ID, "held-match").text}
    held["refused"] = held_bulk(d, "release", "all spam", "matching", False)
    held["refused_url"] = d.current_url
    form = d.find_element(By.ID, "selection")
    held["kept_reason"] = form.find_element(By.NAME, "reason").get_attribute("value")
    held["kept_scope"] = form.find_element(
        By.CSS_SELECTOR, "input[name='scope']:checked"
    ).get_attribute("value")
    held["deleted"] = held_bulk(d, "delete", "all spam", "matching", False)
    d.get(args.base + "/console/held")
    held["left"] = [
        e.get_attribute("data-id") for e in d.find_elements(By.CSS_SELECTOR, "tr[data-id]")
    ]
    facts["held"] = held
    # The campaign's held mail and restrictions, each by one action.
    d.get(args.base + "/console/campaigns")
    facts["campaign_actions"] = {
        "deleted": submit_in(d, "#campaign-delete-held", "phishing run"),
        "ended": submit_in(d, "#campaign-release", "passwords reset"),
    }
    # The incident's restriction ended; the history says who and why.
    d.get(args.base + key_href)
    released = submit_in(d, "#act-release", "password reset by the help desk")
    box = d.find_element(By.ID, "history-box")
    facts["after"] = {
        "released": released,
        "history": box.text,
        "history_open": box.get_attribute("open") is not None,
        "problems": problems(d),
    }
    facts["phone"] = shots_at(args, d, "-phone-after", key)


def shots_at(args, d, suffix, key):
    """Screenshots of every page at one size (the phone's, with `suffix`, also measured:
    width and tap targets)."""
    d.set_window_size(*((390, 844) if suffix else (1400, 1000)))
    d.get(args.base + "/console/held")
    ids = [e.get_attribute("data-id") for e in d.find_elements(By.CSS_SELECTOR, "tr[data-id]")]
    pages = PAGES + [
        ("campaigns", "/console/campaigns"),
        ("incident", "/console/key/" + key),
        ("message", "/console/held/" + ids[0] if ids else "/console/held"),
    ]
    measured = {}
    for name, path in pages:
        d.get(args.base + path)
        WebDriverWait(d, WAIT).until(lambda d: d.find_elements(By.TAG_NAME, "h1"))
        if suffix:
            w = fits(d)
            t = tap_targets(d)
            measured[name] = {
                "scroll": w[0],
                "inner": w[1],
                "targets": t["n"],
                "small_targets": t["small"][:8],
            }
        d.save_screenshot("%s/console-%s%s.png" % (args.shots, name, suffix))
    d.set_window_size(1400, 1000)
    return measured


def scene(args, facts):
    profile = tempfile.mkdtemp(prefix="fg-chromium-scene-")
    d = browser(args, profile, True)
    try:
        login(d, args.base, args.token)
        incident_scene(args, d, facts)
    finally:
        d.quit()
        shutil.rmtree(profile, ignore_errors=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--release", required=True)
    p.add_argument("--delete", required=True)
    p.add_argument("--shots", required=True)
    p.add_argument("--incident", required=True)
    p.add_argument("--scenario", default="console")
    p.add_argument("--campaign", default="")
    p.add_argument("--chromium", default="/usr/bin/chromium")
    p.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    args = p.parse_args()
    facts = {}
    started = time.monotonic()
    try:
        if args.scenario == "incident":
            scene(args, facts)
        else:
            with_script(args, facts)
            without_script(args, facts)
    except TimeoutException as e:
        facts["error"] = "timed out: %s" % (e.msg or "waiting in the browser")
        facts["where"] = traceback.format_exc().splitlines()[-12:]
    except Exception as e:  # reported to the Rust test, which fails with it
        facts["error"] = "%s: %s" % (type(e).__name__, str(e).split("\nStacktrace:")[0])
        facts["where"] = traceback.format_exc().split("\nStacktrace:")[0].splitlines()[-12:]
    facts["seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
