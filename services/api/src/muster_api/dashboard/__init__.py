"""What people see in a browser: the dashboard at ``GET /`` and the API docs at ``GET /docs``.

Plain HTML, CSS and JavaScript shipped in this package (``static/``), no build step; the Swagger UI assets are
vendored under ``static/swagger`` (see its ``VERSION``). Nothing a page loads leaves the machine, and each page's
Content-Security-Policy makes the browser refuse anything else.
"""

from muster_api.dashboard.routes import ASSETS_PATH, install

__all__ = ["ASSETS_PATH", "install"]
