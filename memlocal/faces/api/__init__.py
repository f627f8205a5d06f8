"""The REST API (FastAPI on uvicorn), served by ``memlocal serve``.

Imported only by ``memlocal serve`` and by users who embed the app: ``import memlocal`` does not
load FastAPI.
"""

from .app import create_app

__all__ = ["create_app"]
