"""How the verdict is shown: the terminal summary, the JSON report, JUnit properties, the
Markdown step summary and the HTML report. What they show is ``verdict.model``."""
