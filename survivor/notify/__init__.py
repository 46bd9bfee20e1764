"""What survivor tells an operator, and where: a job's events (events.py), in each receiver's own
payload format (formats.py), delivered off every training path (delivery.py), and the events its
records hold for whoever looks next (records.py). docs/notifications.md tells the whole."""
