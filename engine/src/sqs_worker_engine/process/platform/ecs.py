"""ECS task scale-in protection: autoscaling never stops a task while it has jobs.

When ECS_AGENT_URI is set (ECS sets it in every task), the worker asks the ECS agent to
protect the task as soon as it claims a message, renews the protection while it stays
busy, and lets it go once it has been idle for a little while (or when it stops). The
protection carries a short expiry, so a worker that dies cannot pin its task forever.
The task role needs ecs:UpdateTaskProtection (see deploy/aws/worker-policy.json).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import aiohttp

log = logging.getLogger("sqs_worker_engine.ecs")
IDLE_BEFORE_RELEASE = 10.0  # seconds idle before protection is dropped (avoids flapping)


class ScaleInProtection:
    def __init__(self, agent_uri: str, expires_minutes: int, active_jobs: Callable[[], int]) -> None:
        self.url = agent_uri.rstrip("/") + "/task-protection/v1/state"
        self.expires_minutes = expires_minutes
        self.active_jobs = active_jobs
        self.protected_until = 0.0  # monotonic; 0 = not protected
        self.idle_since: float | None = None
        self._wake = asyncio.Event()
        self._session: aiohttp.ClientSession | None = None

    def job_claimed(self, _event: object = None) -> None:
        """Protect before the job runs, not at the next tick."""
        if not self.protected:
            self._wake.set()

    @property
    def protected(self) -> bool:
        return time.monotonic() < self.protected_until

    async def run(self, tick: float = 1.0) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        try:
            while True:
                await self.step()
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=tick)
        finally:
            await self._session.close()

    async def step(self) -> None:
        now = time.monotonic()
        busy = self.active_jobs() > 0 or self._wake.is_set()
        if busy:
            self.idle_since = None
            renew_at = self.protected_until - self.expires_minutes * 60 / 2
            if now >= renew_at:
                await self._put(True)
        elif self.protected_until:
            self.idle_since = self.idle_since or now
            if now - self.idle_since >= IDLE_BEFORE_RELEASE:
                await self._put(False)

    async def release(self) -> None:
        """On shutdown: nothing is running any more; let ECS scale the task in."""
        if self.protected_until:
            if self._session is None or self._session.closed:
                self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
                try:
                    await self._put(False)
                finally:
                    await self._session.close()
            else:
                await self._put(False)

    async def _put(self, enabled: bool) -> None:
        body: dict[str, object] = {"ProtectionEnabled": enabled}
        if enabled:
            body["ExpiresInMinutes"] = self.expires_minutes
        assert self._session is not None
        sent = time.monotonic()
        try:
            async with self._session.put(self.url, json=body) as resp:
                if resp.status >= 300:
                    log.warning("task protection update refused: HTTP %d %s", resp.status, await resp.text())
                    return
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("task protection update failed: %s", exc)
            return
        self.protected_until = sent + self.expires_minutes * 60 if enabled else 0.0
        log.info("scale-in protection %s", "on" if enabled else "off")
