"""Drives the operator console's payment pages in headless Chromium against a service on Toss.

Usage: python3 console_toss_page.py BASE_URL ADMIN_TOKEN ORDER_ID DAY MISSING_PAYMENT_KEY SCREENSHOT_DIR PAYOUT_DAY PAYOUT

The order's page shows its payment partly refunded (amount, refunded, balance), each refund,
Toss's own record of the payment beside ours and what Toss pays out for it; the ledger page
of DAY shows the MISSING_HERE finding of MISSING_PAYMENT_KEY; the payouts page of
PAYOUT_DAY shows PAYOUT to be paid out for the order's two transactions. A screenshot of
each page goes to SCREENSHOT_DIR. Exits 0 when every check holds; otherwise prints what failed and exits 1.
"""

import os
import sys

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait


def main() -> int:
    base, admin, order, day, missing, shots, payout_day, payout = sys.argv[1:9]
    os.makedirs(shots, exist_ok=True)
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1200"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    wait = WebDriverWait(driver, 20)
    text = lambda: driver.find_element(By.TAG_NAME, "body").text

    try:
        driver.get(f"{base}/console/")
        box = wait.until(ec.visibility_of_element_located((By.ID, "token")))
        box.send_keys(admin)
        driver.find_element(By.CSS_SELECTOR, "#sign-in-form button").click()
        wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "#overview .cards")))

        driver.get(f"{base}/console/#order/{order}")
        driver.refresh()
        wait.until(ec.text_to_be_present_in_element((By.ID, "o-payment"), "PARTIALLY_REFUNDED"))
        payment = driver.find_element(By.ID, "o-payment").text
        if "refunded 4000, balance 26000" not in payment:
            raise AssertionError(f"the payment's balance is not shown: {payment}")
        refunds = driver.find_element(By.XPATH, "//h3[.='Refunds']/following-sibling::table[1]").text
        if "4000" not in refunds or "SUCCEEDED" not in refunds:
            raise AssertionError(f"the refund is not listed: {refunds}")
        wait.until(ec.text_to_be_present_in_element((By.ID, "o-provider"), "PARTIAL_CANCELED"))
        settled = driver.find_element(By.ID, "o-payout").text
        if f"paid out {payout} on {payout_day}" not in settled:
            raise AssertionError(f"the payout is not shown: {settled}")
        driver.save_screenshot(f"{shots}/order-toss.png")

        driver.get(f"{base}/console/#ledger/{day}")
        driver.refresh()
        wait.until(ec.text_to_be_present_in_element((By.ID, "l-body"), "MISSING_HERE"))
        if missing not in driver.find_element(By.ID, "l-body").text:
            raise AssertionError("the finding does not name the payment key")
        driver.save_screenshot(f"{shots}/ledger.png")

        driver.get(f"{base}/console/#payouts/{payout_day}")
        driver.refresh()
        wait.until(ec.text_to_be_present_in_element((By.ID, "y-total"), "to be paid out"))
        total = driver.find_element(By.ID, "y-total").text
        if f"{payout} to be paid out for 2 transactions" not in total:
            raise AssertionError(f"the day's payout is not the order's: {total}")
        rows = driver.find_elements(By.CSS_SELECTOR, "#y-body table tbody tr")
        if len(rows) != 2:
            raise AssertionError(f"{len(rows)} rows, not the approval and the cancel")
        if driver.find_elements(By.ID, "y-no-ledger"):
            raise AssertionError("Toss keeps a ledger, yet the page says payouts need Toss")
        driver.save_screenshot(f"{shots}/payouts.png")
        print("ok: the order's refunds, Toss's record and payout shown, the ledger's finding shown, the day's payouts shown")
        return 0
    except Exception as e:  # noqa: BLE001 - report whatever went wrong, with the page
        print(f"failed: {type(e).__name__}: {e}\n--- page ---\n{text()}")
        driver.save_screenshot(f"{shots}/failure-toss.png")
        return 1
    finally:
        driver.quit()


if __name__ == "__main__":
    sys.exit(main())
