"""Drives headless Chromium through Corral's dashboard (run by tests/dashboard.rs).

Each check prints one line when it holds; a failed check raises, after a screenshot, and the
script exits non-zero. Inputs come from the environment (see dashboard.rs).
"""
import os
import sys

from chrome import browser
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

URL = os.environ["DASHBOARD_URL"]
ARTIFACTS = os.environ["ARTIFACTS"]
ALICE_SESSION = os.environ["ALICE_SESSION"]
BOB_SESSION = os.environ["BOB_SESSION"]


def shot(driver, name):
    driver.save_screenshot(os.path.join(ARTIFACTS, name + ".png"))


def check(driver, name, condition, message):
    if not condition:
        shot(driver, "failed-" + name)
        raise AssertionError(f"{name}: {message}\npage: {driver.current_url}\n"
                             f"{driver.find_element(By.TAG_NAME, 'body').text[:2000]}")


def wait_for(driver, name, condition, message, seconds=20):
    try:
        WebDriverWait(driver, seconds, poll_frequency=0.2).until(lambda d: condition(d))
    except TimeoutException:
        check(driver, name, False, message)


def log_in(driver, token, who):
    driver.get(URL + "/ui")
    check(driver, "login-redirect", driver.current_url.endswith("/ui/login"),
          "an anonymous visit is sent to the log-in page")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "form#login button").click()
    wait_for(driver, "login", lambda d: d.find_elements(By.ID, "who"),
             "the overview shows who is logged in")
    check(driver, "login-who", driver.find_element(By.ID, "who").text.startswith(who),
          f"logged in as {who}")
    print(f"logged in as {who}")


def as_admin(driver):
    log_in(driver, os.environ["ADMIN_TOKEN"], "admin")
    groups = [r.get_attribute("data-group")
              for r in driver.find_elements(By.CSS_SELECTOR, "#groups tr.group")]
    check(driver, "overview", {"web", "burst"} <= set(groups), f"both groups listed: {groups}")
    shot(driver, "overview")

    driver.find_element(By.CSS_SELECTOR, "#groups a[href='/ui/groups/web']").click()
    agent = driver.find_element(By.CSS_SELECTOR, "#agents tr.agent[data-agent='a1']")
    check(driver, "agent-row", "alive" in agent.find_element(By.CSS_SELECTOR, "td.state").text,
          "agent a1 is listed alive")
    waiting = driver.find_element(By.CSS_SELECTOR, f"#pending tr[data-session='{BOB_SESSION}']")
    reason = waiting.find_element(By.CSS_SELECTOR, "td.wait-reason").text
    check(driver, "wait-reason", "room" in reason or "wait" in reason,
          f"bob's session says why it waits: {reason!r}")
    print(f"group page: a1 alive, bob's session waits: {reason}")
    joined = driver.find_elements(By.CSS_SELECTOR, "svg#timeline line.event[data-kind='joined']")
    check(driver, "timeline", len(joined) >= 1, "the timeline marks a1's joining")
    title = joined[0].find_element(By.TAG_NAME, "title").get_attribute("textContent")
    check(driver, "timeline-title", "a1" in title, f"the mark names the agent: {title!r}")
    check(driver, "timeline-band",
          driver.find_elements(By.CSS_SELECTOR, "svg#timeline polygon.band"),
          "the timeline draws the nodes")
    shot(driver, "group-web")

    driver.get(URL + "/ui/groups/burst")
    kinds = {e.get_attribute("data-kind")
             for e in driver.find_elements(By.CSS_SELECTOR, "svg#timeline line.event")}
    check(driver, "timeline-burst", "mark" in kinds, f"burst's timeline marks the scale-in: {kinds}")
    print(f"timeline: web shows the join, burst shows {sorted(kinds)}")
    shot(driver, "group-burst")

    # Alice's session from the group page: its log, followed while it runs.
    driver.get(URL + "/ui/groups/web")
    driver.find_element(By.CSS_SELECTOR, f"#running a[href='/ui/sessions/{ALICE_SESSION}']").click()
    wait_for(driver, "log-first", lambda d: "hello from alice" in d.find_element(By.ID, "log-stdout").text,
             "the log's first line is shown")
    wait_for(driver, "log-follow", lambda d: "second line" in d.find_element(By.ID, "log-stdout").text,
             "the line written later arrives without a reload")
    print("session log followed: both lines seen")
    shot(driver, "session-alice")


def as_bob(driver):
    log_in(driver, os.environ["BOB_TOKEN"], "bob")
    recent = [r.get_attribute("data-session")
              for r in driver.find_elements(By.CSS_SELECTOR, "#recent tr.session")]
    check(driver, "bob-recent", recent == [BOB_SESSION], f"bob sees his own session only: {recent}")
    driver.get(URL + "/ui/groups/web")
    listed = [r.get_attribute("data-session")
              for r in driver.find_elements(By.CSS_SELECTOR, "tr.session")]
    check(driver, "bob-group", ALICE_SESSION not in listed, f"alice's session is not listed: {listed}")
    driver.get(URL + f"/ui/sessions/{ALICE_SESSION}")
    error = driver.find_elements(By.ID, "error")
    check(driver, "bob-refused", error and "another user" in error[0].text,
          "alice's session page is refused to bob")
    check(driver, "bob-no-log", not driver.find_elements(By.ID, "log-stdout"), "no log is shown")
    print("bob is refused alice's session")
    shot(driver, "bob-refused")
    driver.get(URL + "/ui")
    driver.find_element(By.CSS_SELECTOR, "form.logout button").click()
    wait_for(driver, "logout", lambda d: d.current_url.endswith("/ui/login"), "logging out ends the visit")
    driver.get(URL + "/ui")
    check(driver, "logged-out", driver.current_url.endswith("/ui/login"), "the cookie is gone")


def main():
    for step in (as_admin, as_bob):
        driver = browser()
        try:
            step(driver)
        finally:
            driver.quit()


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(e, file=sys.stderr)
        sys.exit(1)
