"""Measuring metrics: speed (the `speed` package, `capscope bench`),
accuracy against gold labels (`evaluate`, `gold_figures`), agreement with
people's judgements (`human`, `human_correlation`, `correlation_report`) and
the published figures beside them (`published`)."""
