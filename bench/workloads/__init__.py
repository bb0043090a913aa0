"""The workloads of ``render-service bench``, by CLI name (see `bench.workloads.base`)."""

from __future__ import annotations

from .base import Call, InvalidResponse, Probe, Session, Workload
from .derender import Derender, StreamDerender
from .four_hop import FourHop
from .multimodal import RenderMM, RenderMMRepeat, RenderMMRoute
from .render import AgentLoop, AgentTrace, RenderLong, RenderShort

WORKLOADS: dict[str, type[Workload]] = {w.name: w for w in (RenderShort, RenderLong, AgentLoop, AgentTrace, Derender, StreamDerender, FourHop, RenderMM, RenderMMRoute, RenderMMRepeat)}

__all__ = ["WORKLOADS", "Call", "InvalidResponse", "Probe", "Session", "Workload"]
