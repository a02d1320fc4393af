"""The server: the REST API (`api`), the server's one scorer taken in turns
(`scoring`), the request guards (`guards`), sign-in (`signin`), training jobs
and model activation (`training`), and the folders it may read (`data_roots`).
`create_app` is the entry point: `capscope.server.create_app(store)`."""
from capscope.server.api import create_app

__all__ = ["create_app"]
