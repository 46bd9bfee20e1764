"""`survivor dashboard`: a read-only web page of a team's jobs, on 127.0.0.1.

- board.py: which jobs, each read through `status.read_job` (refreshed, reading only what changed),
  and the card each makes (state, step, goodput, cost, the deadline's verdict, the last event);
- timeline.py: a job's events and its timeline laid out for the browser (pure);
- web.py: the Flask app (escaped Jinja templates, the package's own CSS and script, no write route)
  and the waitress server that serves it.
"""
