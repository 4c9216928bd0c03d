"""The Wharf web console (``wharf console``): brokers, topics, consumer groups and lag, message
search and trace, in the browser.

A separate process that talks to brokers only through the SDK's public API (``wharf.client``:
``Admin``, ``Producer``, ``PullConsumer``); an import-linter contract keeps it off broker and
store internals. Starlette serves server-rendered Jinja2 pages (plain HTML forms; a few lines of
vanilla JavaScript draw the live chart), all assets from the package, none from a CDN.

Modules: ``cli`` (the subcommand), ``app`` (routes, auth, error pages), ``context`` (what pages
share), ``security`` (bind check, credentials, CSRF), ``brokers`` (SDK clients per endpoint and
the rate sampler), ``overview`` / ``topics`` / ``groups`` / ``messages`` (the pages),
``search`` (time-range paging), ``trace`` (which groups consumed a message), ``rates``
(per-topic and per-group rates between views), ``render`` (bodies, times, sizes).
"""
