"""The verdict: experiments' results and summaries, the gates, the baseline comparison, and
the report they make (``model``, the JSON report's schema). Pure functions over the store's
records: no pytest here."""
