"""Opens a real JupyterLab through Corral's app proxy in headless Chromium (run by
tests/cli/apps.rs): logs in to the dashboard, follows the session's app link, runs the
notebook's one cell and reads the computed value from the page.

Each check prints one line when it holds; a failed check raises after a screenshot.
"""
import os

from chrome import browser
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

URL = os.environ["DASHBOARD_URL"]
ARTIFACTS = os.environ["ARTIFACTS"]
SESSION = os.environ["SESSION"]
TOKEN = os.environ["ALICE_TOKEN"]
EXPECTED = os.environ["EXPECTED"]


def wait_for(driver, name, condition, message, seconds=60):
    try:
        return WebDriverWait(driver, seconds, poll_frequency=0.25).until(lambda d: condition(d))
    except TimeoutException:
        driver.save_screenshot(os.path.join(ARTIFACTS, "failed-" + name + ".png"))
        raise AssertionError(f"{name}: {message}\npage: {driver.current_url}\n"
                             f"{driver.find_element(By.TAG_NAME, 'body').text[:2000]}")


driver = browser("1280,1000")
try:
    driver.get(URL + "/ui/login")
    driver.find_element(By.ID, "token").send_keys(TOKEN)
    driver.find_element(By.CSS_SELECTOR, "form#login button").click()
    wait_for(driver, "login", lambda d: d.find_elements(By.ID, "who"), "logged in")

    driver.get(f"{URL}/ui/sessions/{SESSION}")
    link = wait_for(driver, "app-link",
                    lambda d: d.find_elements(By.CSS_SELECTOR, "#apps a"),
                    "the session's page links its app")[0]
    href = link.get_attribute("href")
    print("the session's page links its app")

    # The link trades its pass for the app's cookie; then JupyterLab opens the notebook.
    driver.get(href)
    wait_for(driver, "jupyterlab", lambda d: f"/apps/{SESSION}/jupyter/" in d.current_url
             and "corral_app_token" not in d.current_url,
             "the link leads to the app, without its pass in the address")
    driver.get(f"{URL}/apps/{SESSION}/jupyter/lab/tree/check.ipynb")
    wait_for(driver, "kernel-idle",
             lambda d: d.find_elements(By.CSS_SELECTOR, ".jp-Notebook .jp-Cell .cm-content")
             and "Idle" in d.find_element(By.TAG_NAME, "body").text,
             "the notebook opens with its kernel idle (its WebSocket through the proxy)", 120)
    print("JupyterLab opened the notebook through the proxy")

    cell = driver.find_element(By.CSS_SELECTOR, ".jp-Notebook .jp-Cell .cm-content")
    cell.click()
    ActionChains(driver).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT).perform()
    wait_for(driver, "output",
             lambda d: any(EXPECTED in o.text for o in
                           d.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output")),
             f"the cell's output shows {EXPECTED}", 60)
    driver.save_screenshot(os.path.join(ARTIFACTS, "jupyter.png"))
    print(f"the cell printed {EXPECTED}")
finally:
    driver.quit()
