"""OCR: PP-OCRv6's text recognizer behind the text detector (docs/ocr.md)."""
