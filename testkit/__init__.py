"""burstbot's test kit: the fakes and checkers tests and benchmarks share. Not part of the product
(not in the wheel; no product module imports it); importable from a checkout's root.

- `testkit.replier`: `ScriptedReplier` (a test holds, finishes, fails or streams each call) and
  `StreamingModel` (streams tokens on the real clock, for benchmarks).
- `testkit.frontend`: `RecordingFrontend`, a front end that records every raw post and edit.
- `testkit.invariants`: `check_invariants`, G1–G3, G9 and G10 over a store and a recording.
- `testkit.engine`: `shut_down`, an engine stopped the way `burstbot run` stops it.
- `testkit.clock`: `FakeClock` (moves only when a test advances it), `OffsetClock` (a host set
  wrong) and `settle` (let every ready task run).
- `testkit.fake_slack`, `testkit.fake_discord`, `testkit.fake_anthropic`: the platforms' and the
  model's HTTP servers on 127.0.0.1, for the real SDKs; `testkit.rate_limits` their 429s.
"""

from testkit.frontend import Edit, Fault, Post, RecordingFrontend
from testkit.invariants import InvariantViolation, check_invariants
from testkit.replier import ModelCall, ReplierCall, ScriptedReplier, StreamingModel

__all__ = [
    "Edit",
    "Fault",
    "InvariantViolation",
    "ModelCall",
    "Post",
    "RecordingFrontend",
    "ReplierCall",
    "ScriptedReplier",
    "StreamingModel",
    "check_invariants",
]
