"""sessionvisor's HTTP gateway: sessions over HTTP with API keys and tenants.

The outermost layer: imports ``supervisor`` and ``actors``; neither imports it.
Needs the ``server`` extra (FastAPI, uvicorn).
"""

from gateway.app import create_app as create_app
from gateway.app import openapi_document as openapi_document
from gateway.keys import ApiKey as ApiKey
from gateway.keys import KeyNotFound as KeyNotFound
from gateway.keys import KeyStore as KeyStore
from gateway.keys import NewKey as NewKey
from gateway.keys import SecretUnusable as SecretUnusable
from gateway.limits import Limits as Limits
from gateway.templates import TemplateFactoryError as TemplateFactoryError
from gateway.templates import TemplateLoadError as TemplateLoadError
from gateway.templates import load_template as load_template
from gateway.templates import load_templates as load_templates

__all__ = [
    "ApiKey",
    "KeyNotFound",
    "KeyStore",
    "Limits",
    "NewKey",
    "SecretUnusable",
    "TemplateFactoryError",
    "TemplateLoadError",
    "create_app",
    "load_template",
    "load_templates",
    "openapi_document",
]
