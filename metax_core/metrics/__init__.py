"""The data-exporter's metrics as a format (C8, R-EXPORTER): names, label keys, and what a sample becomes.

Why in the core: metric names and label keys cross process boundaries (Prometheus, the chart's Grafana
dashboard, users' alerts), so they have one owner here (`names`), read by the exporter's collector
(services/data_exporter), the dashboard generator (metax_dev/dashboard.py) and the tests. What a telemetry
sample and the pods holding each GPU turn into (`exposition`), and who holds which GPU (`attribution`), are
pure decisions with unit tests; the service only samples, serves and counts time.
"""
