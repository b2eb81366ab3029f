"""Headless Chromium (Debian's package) under Selenium, as the browser tests drive it."""
from selenium import webdriver
from selenium.webdriver.chrome.service import Service


def browser(size="1280,1400"):
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    # As root Chromium needs --no-sandbox; /dev/shm is small in containers.
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=" + size):
        options.add_argument(arg)
    # The explicit driver path keeps Selenium from downloading one.
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
