"""What one writer is told to do: its node, its directories, its policy, and its timings."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nfd_lite.files.limits import Limits
from nfd_lite.files.policy import Policy


@dataclass
class WriterSettings:
    node_name: str
    directories: list[Path]
    policy: Policy = field(default_factory=Policy)
    limits: Limits = field(default_factory=Limits)
    overwrite: bool = False
    poll: bool = False
    resync_interval: float = 60.0
    debounce: float = 0.002
    debounce_cap: float = 0.25
    # PATCHes: bursts of up to write_burst, then write_rate a second on average (a token bucket), so a
    # feature file flipping every few milliseconds costs the API server one write a second, not dozens.
    write_rate: float = 1.0
    write_burst: int = 10
    startup_grace: float = 60.0
    watch_timeout: int = 1800
    # The API server sends a bookmark on a quiet watch about once a minute (its watch cache's heartbeat,
    # 1.30 and later); a watch that brings nothing for this long is presumed cut off and opened again.
    watch_silence: float = 75.0
    request_timeout: float = 10.0  # each request's one deadline (the answer read whole within it)
    # No answer for this long once a request has failed unanswered (refused, timed out, a silent watch):
    # /readyz fails, nfd_lite_api_unreachable is 1 and one line names the likely cause. Above
    # watch_silence plus a request's timeout, so that a quiet healthy watch never reads as an outage.
    api_unreachable_after: float = 90.0
    metrics_address: str | None = None
    max_backoff: float = 30.0
    slow_retry: float = 30.0  # 401/403 need a human: retry slowly rather than crash-loop or hammer
    require_admission_policy: bool = True  # refuse to write where the policy is not enforced
    policy_recheck_after: float = 300.0  # an API outage this long may have been an upgrade: check again
    # While running, check this often that the policy still fences the writer (a deleted binding, an older
    # policy of the same name): 0 only after a long outage. Each check is 7 requests (docs/nfd-lite.md).
    admission_check_interval: float = 300.0
