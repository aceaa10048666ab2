"""The web dashboard (``alkstore-trio dashboard``): an ASGI app for operators.

It needs the ``dashboard`` extra (``pip install 'alkstore_trio[dashboard]'``): Starlette,
Jinja2 and Hypercorn, all running on trio. :func:`create_app` makes the app around an open
:class:`~alkstore_trio.Store`, to mount in your own service; :func:`serve_dashboard` serves
it with Hypercorn's trio worker. The rules it keeps are W1–W9 of the contract.
"""

from ._app import create_app as create_app
from ._security import BASIC_AUTH_ENV as BASIC_AUTH_ENV
from ._security import TOKEN_ENV as TOKEN_ENV
from ._security import Auth as Auth
from ._security import check_bind as check_bind
from ._security import parse_bind as parse_bind
from ._serve import serve_dashboard as serve_dashboard
