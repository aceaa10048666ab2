"""Engines: the backend protocol every engine implements, and the engines themselves.

The public ``Store`` facade (``alkstore_trio._store``) validates every argument and then
calls a backend through :class:`~alkstore_trio._engines._protocol.Backend`; it never
names a concrete engine. ``open_store`` picks the engine from the URL.
"""
