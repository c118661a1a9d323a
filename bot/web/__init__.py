"""The operator's web page: server-rendered HTML over the same operations as the command line.

`server.py` serves it on aiohttp (login, roles, CSRF, the pages, the actions), `auth.py` keeps
the sessions and the login limiter, `views.py` gathers what the pages show from the store,
`pages.py` renders them (every stored text escaped and redacted), `charts.py` draws the usage
charts as SVG on the server, `feedback.py` is the usage page's panel of votes. No script runs in
the browser: an open page reloads itself with a meta refresh while what it shows can change.
"""
