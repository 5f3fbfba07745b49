"""Runnable example: extract a typed object with the embedded model (no server needed).

    .venv/bin/python docs/examples/extract_invoice.py
"""

from pydantic import BaseModel

import afm_struct


class Invoice(BaseModel):
    invoice_number: str
    seller: str
    total: float
    currency: str
    paid: bool


text = ("Extract the invoice as JSON: Invoice INV-2041 from Northwind Traders, dated 2024-03-15, "
        "total 1250.50 EUR, not paid yet.")
result = afm_struct.extract(text, Invoice, max_tokens=200)
print(result.mode, result.value)
print(result.raw_text)
