"""Routes a door adds beside its render and derender routes, on ``render-service serve``.

| route | body | answer |
|---|---|---|
| ``POST <door.path>/count_tokens`` (Messages: ``/v1/messages/count_tokens``) | ``door.count_tokens_request`` | ``{"input_tokens"}`` (Anthropic's) |

Errors: in the door's shape (`Door.owns_errors`). Every door's render routes are
`http.render_routes`; its derender routes `http.derender_routes`.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.routing import Route

from ..doors import DOORS, Door
from ..errors import OpenAIError
from .common import AppContext, JSONResponse, error_response, read_json
from .render_routes import door_media
from ..wire.validate import validate


def routes(ctx: AppContext) -> list[Route]:
    """``count_tokens`` of every door that counts tokens (`Door.count_tokens`), bound to ``ctx``."""

    def count_tokens(door: Door):
        async def handle(request: Request) -> JSONResponse:
            try:
                req = validate(door.count_tokens_request, await read_json(request, ctx.config.max_body_bytes))
                ctx.check_model(req.model)
                body = door.render_body(ctx.bundle, ctx.config, req)
                loaded = await door_media(ctx, door, body["messages"], req)
                return JSONResponse(await ctx.run_cpu(door.count_tokens, ctx.bundle, ctx.config, req, loaded, body))
            except OpenAIError as err:
                return error_response(err, request.url.path)
        return handle

    return [Route(door.count_tokens_path, count_tokens(door), methods=["POST"])
            for door in DOORS.values() if door.count_tokens is not None]
