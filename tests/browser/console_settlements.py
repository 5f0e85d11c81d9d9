"""Drives the console's Settlements page (/console/#settlements) in headless Chromium.

Usage: python3 console_settlements.py BASE_URL ADMIN_TOKEN RETRY_SETTLEMENT RETRY_ORDER_NUMBER
       MARK_SETTLEMENT MARK_ORDER_NUMBER SCREENSHOT_DIR

Before sign-in the page shows no navigation and no error. Both settlements wait for an
operator: the overview counts them; the Settlements page lists them by order number; the
first is retried from that list (its receiver is back); the second's order page, reached by
its number, shows the settlement waiting with its attempts and is marked settled there; each
with a reason, and the page says each order moved on. The Payouts page says payouts need
Toss (this service runs the mock provider). Exits 0 when every check holds; otherwise prints
what failed and exits 1.
"""

import os
import sys

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait


def main() -> int:
    base, admin, retry_id, retry_number, mark_id, mark_number, shots = sys.argv[1:8]
    os.makedirs(shots, exist_ok=True)
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    wait = WebDriverWait(driver, 20)
    body = lambda: driver.find_element(By.TAG_NAME, "body").text

    def answer_prompt(reason):
        box = wait.until(ec.visibility_of_element_located((By.ID, "reason")))
        box.send_keys(reason)
        driver.find_element(By.ID, "reason-ok").click()

    try:
        driver.get(f"{base}/console/")
        box = wait.until(ec.visibility_of_element_located((By.ID, "token")))
        # Before sign-in: the sign-in form only, no navigation, no error.
        if driver.find_element(By.ID, "nav").is_displayed():
            raise AssertionError("the navigation shows before sign-in")
        if driver.find_element(By.ID, "sign-in-error").is_displayed() or "Error" in body():
            raise AssertionError(f"an error shows before sign-in: {body()!r}")
        driver.save_screenshot(f"{shots}/sign-in.png")
        box.send_keys(admin)
        driver.find_element(By.CSS_SELECTOR, "#sign-in-form button").click()
        wait.until(lambda d: "Settlements needing an operator\n2" in d.find_element(By.ID, "overview").text)
        if not driver.find_element(By.ID, "nav").is_displayed():
            raise AssertionError("no navigation once signed in")

        driver.find_element(By.LINK_TEXT, "Settlements").click()
        wait.until(ec.presence_of_element_located((By.XPATH, f"//button[.='Retry {retry_id}']")))
        for number in (retry_number, mark_number):
            driver.find_element(By.LINK_TEXT, f"#{number}")  # each listed by its order's number
        driver.save_screenshot(f"{shots}/settlements.png")
        driver.find_element(By.XPATH, f"//button[.='Retry {retry_id}']").click()
        answer_prompt("console test: accounting is back")
        wait.until(ec.text_to_be_present_in_element((By.ID, "status"), f"Settlement {retry_id}: order #{retry_number}"))
        wait.until(ec.text_to_be_present_in_element((By.ID, "status"), "settlement SUCCEEDED"))

        # The other one from its order's page, reached by its number.
        wait.until(lambda d: f"Retry {retry_id}" not in d.find_element(By.ID, "s-body").text)
        driver.find_element(By.LINK_TEXT, f"#{mark_number}").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "o-settlement"), f"Settlement {mark_id} AWAITING_OPERATOR"))
        shown = driver.find_element(By.ID, "o-settlement").text
        if "3 attempts" not in shown or "last error" not in shown:
            raise AssertionError(f"the order page does not show the attempts and the error: {shown!r}")
        driver.save_screenshot(f"{shots}/order-settlement.png")
        # The order page's own button (the Settlements list, hidden now, has one too).
        driver.find_element(By.XPATH, f"//*[@id='o-body']//button[.='Mark settled {mark_id}']").click()
        answer_prompt("console test: booked by hand")
        wait.until(ec.text_to_be_present_in_element((By.ID, "status"), f"Settlement {mark_id}: order #{mark_number}"))
        wait.until(ec.text_to_be_present_in_element((By.ID, "status"), "is COMPLETED"))
        wait.until(ec.text_to_be_present_in_element((By.ID, "o-settlement"), f"Settlement {mark_id} SUCCEEDED"))
        if driver.find_elements(By.XPATH, f"//*[@id='o-body']//button[.='Mark settled {mark_id}']"):
            raise AssertionError("a settled settlement still offers its repairs")

        driver.find_element(By.LINK_TEXT, "Payouts").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "y-no-ledger"), "payment.provider = toss"))
        driver.save_screenshot(f"{shots}/payouts-no-ledger.png")
        print("ok: nothing before sign-in; retried from the list, marked settled from the order page; payouts need Toss")
        return 0
    except Exception as exc:  # noqa: BLE001 - report what failed, with the page
        print(f"failed: {exc!r}\n{driver.find_element(By.TAG_NAME, 'body').text}")
        driver.save_screenshot(f"{shots}/settlements-failed.png")
        return 1
    finally:
        driver.quit()


if __name__ == "__main__":
    sys.exit(main())
