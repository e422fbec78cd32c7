"""Activities: every side effect of a call (database, webhook, HTTP tools).

Kept empty on purpose: workflow code imports the activity modules it calls and
``activities.search_attributes`` inside Temporal's sandbox, and a package ``__init__``
that pulled in SQLAlchemy or httpx would drag them into every workflow run.
"""
