"""Drives the console's merchant pages (/console/#merchants) in headless Chromium.

Usage: python3 console_merchants.py BASE_URL ADMIN_TOKEN MEMBER_TOKEN CODE OTHER_CODE SCREENSHOT_DIR

The operator signs in and sees every merchant in the list and the picker; opens CODE's page
(its stores, members, keys and daily report); makes an API key from the page and sees it
once — gone once the page is shown again, only its prefix listed. The member of CODE signs
in: only the Merchants link shows, the list holds CODE and never OTHER_CODE, and its
merchant's page has no members or keys. The operator also opens CODE's webhook endpoint
(disabled by a 410, marked so), its FAILED message and that message's attempts (410),
enables the endpoint and resends the message from the page. Exits 0 when every check holds; otherwise prints
what failed and exits 1.
"""

import os
import sys

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait


def main() -> int:
    base, admin, member, code, other, shots = sys.argv[1:7]
    os.makedirs(shots, exist_ok=True)
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1400"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    wait = WebDriverWait(driver, 20)
    body = lambda: driver.find_element(By.TAG_NAME, "body").text

    def sign_in(token):
        driver.get(f"{base}/console/")
        driver.execute_script("sessionStorage.clear(); location.hash = '';")
        driver.get(f"{base}/console/")
        box = wait.until(ec.visibility_of_element_located((By.ID, "token")))
        box.send_keys(token)
        driver.find_element(By.CSS_SELECTOR, "#sign-in-form button").click()
        wait.until(ec.visibility_of_element_located((By.ID, "nav")))

    try:
        # The operator: every merchant, a page per merchant, a key shown once.
        sign_in(admin)
        driver.get(f"{base}/console/#merchants")
        wait.until(ec.text_to_be_present_in_element((By.ID, "m-body"), other))
        if code not in driver.find_element(By.ID, "m-body").text:
            raise AssertionError(f"the operator's list lacks {code}: {body()!r}")
        driver.save_screenshot(f"{shots}/merchants.png")
        row = [r for r in driver.find_elements(By.CSS_SELECTOR, "#m-body tr") if code in r.text][0]
        row.find_element(By.LINK_TEXT, "Open").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "mm-report"), "Asia/Seoul"))
        picker = driver.find_element(By.ID, "mm-picker").text
        if code not in picker or other not in picker:
            raise AssertionError(f"the picker does not offer every merchant: {picker!r}")
        if "GANGNAM" not in driver.find_element(By.ID, "mm-stores").text:
            raise AssertionError(f"the store is not listed: {body()!r}")
        if "carol" not in driver.find_element(By.ID, "mm-members").text:
            raise AssertionError(f"the member is not listed: {body()!r}")
        form = driver.find_element(By.ID, "mm-key-form")
        form.find_element(By.NAME, "name").send_keys("console key")
        form.find_element(By.CSS_SELECTOR, "button").click()
        shown = wait.until(ec.visibility_of_element_located((By.ID, "mm-new-key-value"))).text.strip()
        if not shown.startswith("mk_"):
            raise AssertionError(f"no key shown: {shown!r}")
        driver.save_screenshot(f"{shots}/merchant.png")
        driver.get(f"{base}/console/#merchants")
        wait.until(ec.text_to_be_present_in_element((By.ID, "m-body"), code))
        [r for r in driver.find_elements(By.CSS_SELECTOR, "#m-body tr") if code in r.text][0] \
            .find_element(By.LINK_TEXT, "Open").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "mm-keys"), "console key"))
        if shown in body() or shown[16:] in driver.page_source:
            raise AssertionError("the key is shown again")
        if shown[3:15] not in driver.find_element(By.ID, "mm-keys").text:
            raise AssertionError("the new key's prefix is not listed")

        # Its webhook endpoint: disabled (410), its message FAILED; enabled and resent here.
        wait.until(ec.text_to_be_present_in_element((By.ID, "mm-webhooks"), "DISABLED: GONE"))
        driver.find_element(By.ID, "mm-webhooks").find_element(By.LINK_TEXT, "Messages").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "wh-messages"), "FAILED"))
        driver.save_screenshot(f"{shots}/webhook.png")
        def press(button):
            # The table is drawn again after each action: find the row afresh until it holds.
            def clicked(d):
                try:
                    row = d.find_elements(By.CSS_SELECTOR, "#wh-messages tbody tr")[0]
                    row.find_element(By.XPATH, f".//button[text()='{button}']").click()
                    return True
                except (StaleElementReferenceException, IndexError):
                    return False
            wait.until(clicked)

        press("Attempts")
        wait.until(ec.text_to_be_present_in_element((By.ID, "wh-attempts"), "410"))
        wait.until(ec.element_to_be_clickable((By.ID, "wh-enable"))).click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "wh-summary"), "enabled"))
        wait.until(ec.text_to_be_present_in_element((By.ID, "status"), "Endpoint enabled."))
        press("Resend")
        wait.until(ec.text_to_be_present_in_element((By.ID, "wh-messages"), "PENDING"))

        # The member: its merchant only.
        sign_in(member)
        wait.until(ec.text_to_be_present_in_element((By.ID, "m-body"), code))
        links = [a.text for a in driver.find_elements(By.CSS_SELECTOR, "nav a") if a.is_displayed()]
        if links != ["Merchants"]:
            raise AssertionError(f"a member sees operator pages: {links}")
        if other in body():
            raise AssertionError(f"a member sees another merchant: {body()!r}")
        driver.find_element(By.LINK_TEXT, "Open").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "mm-report"), "Asia/Seoul"))
        if driver.find_element(By.ID, "mm-operator").is_displayed():
            raise AssertionError("a member sees the members and keys")
        if other in driver.find_element(By.ID, "mm-picker").text:
            raise AssertionError("a member's picker offers another merchant")
        driver.save_screenshot(f"{shots}/member.png")
        print(f"ok: operator saw {code} and {other}, made a key shown once, enabled a webhook endpoint "
              f"and resent its message; the member saw {code} only")
        return 0
    except Exception as e:  # noqa: BLE001 - reported as the failure
        print(f"{type(e).__name__}: {e}\n{body() if driver else ''}")
        return 1
    finally:
        driver.quit()


if __name__ == "__main__":
    sys.exit(main())
