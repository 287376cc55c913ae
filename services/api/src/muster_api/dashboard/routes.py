"""Routes of the dashboard and of the offline API docs."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "static"
ASSETS_PATH = "/ui"
OAUTH2_REDIRECT = "/docs/oauth2-redirect"

# Same-origin only: agent-supplied strings are rendered as text anyway, and no script, style or connection can reach
# another host even if one slipped through.
DASHBOARD_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
# Swagger UI is started by an inline script (FastAPI's page) and styles elements inline.
DOCS_CSP = (
    "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; font-src 'self' data:; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"}

router = APIRouter(include_in_schema=False)


@router.get("/")
async def dashboard() -> FileResponse:
    return FileResponse(STATIC / "index.html", headers={**SECURITY_HEADERS, "Content-Security-Policy": DASHBOARD_CSP})


@router.get("/docs")
async def docs(request: Request) -> HTMLResponse:
    page = get_swagger_ui_html(
        openapi_url=request.app.openapi_url or "/openapi.json",
        title=f"{request.app.title} — API",
        swagger_js_url=f"{ASSETS_PATH}/swagger/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS_PATH}/swagger/swagger-ui.css",
        swagger_favicon_url=f"{ASSETS_PATH}/swagger/favicon-32x32.png",
        oauth2_redirect_url=OAUTH2_REDIRECT,
        # Swagger UI would otherwise send the whole document to a public validator for its badge.
        swagger_ui_parameters={"validatorUrl": None},
    )
    page.headers.update({**SECURITY_HEADERS, "Content-Security-Policy": DOCS_CSP})
    return page


@router.get(OAUTH2_REDIRECT)
async def docs_oauth2_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


def install(app: FastAPI) -> None:
    """Add the two pages and their assets to ``app`` (which must be built with ``docs_url=None``)."""
    app.include_router(router)
    app.mount(ASSETS_PATH, StaticFiles(directory=STATIC), name="assets")
