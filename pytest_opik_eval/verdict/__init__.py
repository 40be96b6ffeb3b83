"""The verdict: experiments' results and summaries, the gates, the baseline comparison. Pure
functions over the store's records: no pytest here."""
