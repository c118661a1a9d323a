"""Operator commands against a prepared database: status, explain, migrate, check-config, demo."""

from __future__ import annotations

import re
import time
from pathlib import Path
from subprocess import CompletedProcess

from bot.cli.explain import explain_lines
from bot.cli.status import relative
from bot.core.errors import PermanentDeliveryError
from bot.core.events import Attachment, ConversationKey, IncomingMessage
from bot.core.store import Timing
from storage.sqlite import MIGRATIONS, SqliteStore
from testkit import RecordingFrontend, ScriptedReplier
from testkit.clock import FakeClock
from tests.conftest import make_engine
from tests.test_cli import burstbot

ANSWERED = ConversationKey("test", "w1", "answered")
PENDING = ConversationKey("test", "w1", "pending")
LEASED = ConversationKey("test", "w1", "leased")
FAILED = ConversationKey("test", "w1", "failed")


async def prepare(path: Path) -> None:
    """One conversation in each state an operator should be able to see."""
    store = SqliteStore(str(path))
    await store.open()
    clock = FakeClock(start=time.time() - 30)
    frontend = RecordingFrontend()
    replier = ScriptedReplier(hold=True)
    engine = make_engine(store, clock, replier, frontend)

    def said(key: ConversationKey, n: int, text: str) -> IncomingMessage:
        return IncomingMessage(key, f"{key.channel}-{n}", "u1", "alice", text)

    await engine.ingest(said(ANSWERED, 1, "what is"))
    await clock.advance(2)
    await engine.run_due()
    first = await replier.next_call(0)
    first.stream(4)
    await clock.advance(0.5)
    await engine.ingest(said(ANSWERED, 2, "the time?"))  # supersedes the first generation
    await engine.idle()
    await clock.advance(2)
    await engine.run_due()
    (await replier.next_call(1)).finish("noon")
    await engine.idle()

    frontend.failures.append(PermanentDeliveryError("channel_not_found"))
    await engine.ingest(said(FAILED, 1, "hello?"))
    await clock.advance(2)
    await engine.run_due()
    (await replier.next_call(2)).finish("hi")
    await engine.idle()

    await engine.ingest(said(LEASED, 1, "anyone"))
    await clock.advance(2)
    assert await store.acquire_lease(LEASED.id, "other-host:123", clock.now(), 3600) is not None

    await clock.advance(20)
    await engine.ingest(said(PENDING, 1, "still typing"))
    await store.see_process("idle-host:7:aa", "idle-host", 7, "0.1.0", clock.now())
    await store.see_process("dead-host:9:bb", "dead-host", 9, "0.0.9", clock.now() - 600)
    await store.close()


async def test_status_shows_pending_input_timers_leases_and_the_outbox(tmp_path: Path) -> None:
    await prepare(tmp_path / "ops.db")
    config = tmp_path / "c.toml"
    config.write_text(f'[storage]\nurl = "sqlite:///{tmp_path / "ops.db"}"\n')
    result = burstbot(["status", "--config", str(config)], tmp_path)
    assert result.returncode == 0, result.stderr
    in_flight, processes, capacity, recent = result.stdout.split("\n\n")
    lines = {line.split()[0]: line for line in in_flight.splitlines()[2:-1]}
    assert set(lines) == {PENDING.id, LEASED.id, FAILED.id}
    assert re.search(r"due (in )?[\d.]+s( ago)?, deadline in [\d.]+s", lines[PENDING.id])
    assert re.search(r"other-host:123 #1, expires in (59|60) min", lines[LEASED.id])
    assert "0 pending, 1 failed" in lines[FAILED.id]
    assert "3 in flight: 2 with pending input, 1 leased; outbox 0 pending, 1 failed" in in_flight
    assert ANSWERED.id in recent
    title, headers, *rows = processes.splitlines()
    assert title == "processes:" and headers.split() == [
        "PROCESS", "STATE", "LAST", "SEEN", "HOST", "PID", "VERSION", "STARTED", "HOLDS"
    ]  # fmt: skip
    seconds = re.compile(r"^[\d.]+s ago$")  # as long as the command took to start
    cells = [[seconds.sub("Xs ago", cell) for cell in re.split(r"  +", row)] for row in rows]
    assert cells == [  # live ones first, then the gone
        ["idle-host:7:aa", "alive", "Xs ago", "idle-host", "7", "0.1.0", "Xs ago",
         "0 conversation(s)"],
        ["other-host:123", "alive", "-", "-", "-", "-", "-", "1 conversation(s)"],  # no row
        ["dead-host:9:bb", "gone", "10 min ago", "dead-host", "9", "0.0.9", "10 min ago",
         "0 conversation(s)"],
    ]  # fmt: skip
    assert capacity.splitlines()[:2] == [
        "capacity:",
        "  Claude API: no limits heard yet (only max_concurrent_generations bounds)",
    ]


async def test_explain_tells_the_story_of_a_superseded_then_posted_burst(tmp_path: Path) -> None:
    await prepare(tmp_path / "ops.db")
    config = tmp_path / "c.toml"
    config.write_text(f'[storage]\nurl = "sqlite:///{tmp_path / "ops.db"}"\n')
    result = burstbot(["explain", "test/w1/answered", "--config", str(config)], tmp_path)
    assert result.returncode == 0, result.stderr
    story = [line.split("s  ", 1)[1] for line in result.stdout.splitlines()[1:-1]]
    assert story == [
        "received  #1 alice: what is",
        "burst     v1 → lease #1, generation started",
        "received  #2 alice: the time?",
        "generated v1: superseded by newer input, stream cancelled (0 in / 4 out tokens; "
        "output wasted) in 0.50s",
        "burst     v1-v2 → lease #2, generation started",
        "generated v1-v2: answered (0 in / 0 out tokens) in 0.00s",
        "reply r1 [👍/👎] committed, covers v1-v2: noon",
        "posted    r1 as r1-p0",
    ]
    assert result.stdout.splitlines()[-1] == "now: version 2, answered 2"
    failed = burstbot(["explain", "test/w1/failed/", "--config", str(config)], tmp_path)
    assert "FAILED    r2 after 1 attempt(s): channel_not_found" in failed.stdout
    missing = burstbot(["explain", "test/w1/nowhere", "--config", str(config)], tmp_path)
    assert missing.returncode == 1 and "no conversation 'test/w1/nowhere/'" in missing.stderr
    bad = burstbot(["explain", "not-an-id", "--config", str(config)], tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_after_a_terminal_burst_status_and_explain_show_it(tmp_path: Path) -> None:
    assert burstbot(["run"], tmp_path, stdin="a\nb\n").returncode == 0
    status = burstbot(["status"], tmp_path)
    assert "console/local/terminal/  2/2" in status.stdout
    explain = burstbot(["explain", "console/local/terminal/"], tmp_path)
    assert "received  #2 you: b" in explain.stdout
    assert "posted    r1 as " in explain.stdout


def test_migrate_creates_the_schema(tmp_path: Path) -> None:
    missing = burstbot(["status"], tmp_path)
    assert missing.returncode == 2 and "no database at burstbot.db" in missing.stderr
    assert not (tmp_path / "burstbot.db").exists()
    result = burstbot(["migrate"], tmp_path)
    assert result.returncode == 0, result.stderr
    expected = f"sqlite:///burstbot.db: schema at version {len(MIGRATIONS)}, up to date"
    assert result.stdout.strip() == expected
    assert (tmp_path / "burstbot.db").exists()


def test_check_config_names_missing_secrets_and_never_prints_values(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        '[llm]\nprovider = "anthropic"\n[slack]\nenabled = true\n'
        '[access]\nblock_users = ["U1", "U2"]\ndm_policy = "off"\n'
        "[limits]\nuser_daily_tokens = 5000\nchannel_daily_tokens = 90000\n"
        '[tools]\nweb_search = true\nweb_search_blocked_domains = ["spam.example"]\n'
    )
    env = {"ANTHROPIC_API_KEY": "sk-ant-do-not-print", "SLACK_BOT_TOKEN": "", "SLACK_APP_TOKEN": ""}
    result = burstbot(["check-config", "--config", str(config)], tmp_path, env=env)
    assert result.returncode == 2
    missing = [("bot_token_env", "SLACK_BOT_TOKEN"), ("app_token_env", "SLACK_APP_TOKEN")]
    assert result.stderr.splitlines() == [
        f"burstbot: config error: slack.{key}: environment variable {name} is not set"
        for key, name in missing
    ]
    assert "sk-ant-do-not-print" not in result.stdout + result.stderr
    assert "ANTHROPIC_API_KEY set" in result.stdout
    assert "block users 2; direct messages off" in result.stdout
    assert "5000 tokens/user/day, 90000 tokens/channel/day" in result.stdout
    assert (
        "tools       web search on (3/burst; 1 domain(s) blocked), web fetch off; "
        "0 channel override(s)"
    ) in result.stdout
    env.update(SLACK_BOT_TOKEN="xoxb-x", SLACK_APP_TOKEN="xapp-x")
    ok = burstbot(["check-config", "--config", str(config)], tmp_path, env=env)
    assert ok.returncode == 0 and ": OK" in ok.stdout and "xoxb-x" not in ok.stdout


def test_check_config_names_the_web_pages_missing_tokens(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        '[llm]\nprovider = "offline"\n[web]\nenabled = true\nviewer_token_env = "WEB_VIEWER"\n'
    )
    env = {"BURSTBOT_WEB_TOKEN": "operator-token-do-not-print", "WEB_VIEWER": ""}
    result = burstbot(["check-config", "--config", str(config)], tmp_path, env=env)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "burstbot: config error: web.viewer_token_env: environment variable WEB_VIEWER is not set"
    ]
    assert "web         http://127.0.0.1:9465/ (BURSTBOT_WEB_TOKEN set, WEB_VIEWER MISSING)" in (
        result.stdout
    )
    assert "operator-token-do-not-print" not in result.stdout + result.stderr


def test_demo_shows_one_reply_per_burst_and_the_timeline(tmp_path: Path) -> None:
    result = burstbot(["demo", "--quiet", "0.3"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("burstbot: Got your") == 3
    assert "superseded by newer input" in result.stdout
    assert result.stdout.count("posted    r") == 3
    assert result.stdout.rstrip().endswith("now: version 8, answered 8")


def test_a_database_password_is_never_printed() -> None:
    from bot.cli.check import check_config, display_url
    from bot.config import parse_config

    url = "postgresql://bot:s3cret-pw@db.internal:5432/burstbot?sslmode=require"
    assert display_url(url) == "postgresql://bot:***@db.internal:5432/burstbot?sslmode=require"
    config = parse_config({"storage": {"url": url}, "llm": {"provider": "offline"}})
    summary, problems = check_config(config, environ={})
    assert problems == [] and "s3cret-pw" not in "\n".join(summary)


EVIL = ConversationKey("test", "w1", "evil\x1b]0;owned\x07")


async def prepare_hostile(path: Path) -> None:
    """A chat user who sends terminal escapes and bidi overrides, and a matching reply."""
    store = SqliteStore(str(path))
    await store.open()
    clock = FakeClock(start=time.time() - 30)
    replier = ScriptedReplier(hold=True)
    engine = make_engine(store, clock, replier, RecordingFrontend())
    text = "secret plan \x1b[2J\x1b[31mred\u202eevil\u2066 \x9b6n end"
    await engine.ingest(IncomingMessage(EVIL, "m1", "u1", "mallory\x1b[8m", text))
    await clock.advance(2)
    await engine.run_due()
    (await replier.next_call(0)).finish("the secret answer \u202e\x1b[0m")
    await engine.idle()
    await store.close()


def only_printable(output: str) -> bool:
    return all(line.isprintable() for line in output.splitlines())


async def test_explain_and_status_escape_control_and_bidi_characters(tmp_path: Path) -> None:
    await prepare_hostile(tmp_path / "ops.db")
    config = tmp_path / "c.toml"
    config.write_text(f'[storage]\nurl = "sqlite:///{tmp_path / "ops.db"}"\n')
    status = burstbot(["status", "--all", "--config", str(config)], tmp_path)
    assert status.returncode == 0, status.stderr
    assert only_printable(status.stdout)
    assert "test/w1/evil\\x1b]0;owned\\x07/" in status.stdout
    explain = burstbot(["explain", EVIL.id, "--config", str(config)], tmp_path)
    assert explain.returncode == 0, explain.stderr
    assert only_printable(explain.stdout)
    assert "mallory\\x1b[8m: secret plan \\x1b[2J\\x1b[31mred\\u202eevil\\u2066 \\x9b6n" in (
        explain.stdout
    )
    assert "the secret answer \\u202e\\x1b[0m" in explain.stdout


async def test_explain_redact_hides_message_and_reply_text(tmp_path: Path) -> None:
    await prepare_hostile(tmp_path / "ops.db")
    config = tmp_path / "c.toml"
    config.write_text(f'[storage]\nurl = "sqlite:///{tmp_path / "ops.db"}"\n')
    result = burstbot(["explain", EVIL.id, "--redact", "--config", str(config)], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "secret" not in result.stdout and only_printable(result.stdout)
    assert "received  #1 mallory\\x1b[8m: [38 chars]" in result.stdout
    assert "committed, covers v1: [23 chars]" in result.stdout


async def test_explain_says_which_messages_came_in_through_catch_up(store: SqliteStore) -> None:
    key = ConversationKey("slack", "T1", "D1")
    timing = Timing(quiet_seconds=1.0, max_wait_seconds=5.0)
    for n, via in enumerate(["", "catch-up", "held"]):
        message = IncomingMessage(key, f"D1:{n}", "U1", "alice", f"text {n}", via=via)
        await store.ingest(message, 1_000.0 + n, timing)
    lines = await explain_lines(store, key.id, 1_010.0)
    assert lines is not None
    assert [line.split("s  ", 1)[1] for line in lines[1:-1]] == [
        "received  #1 alice: text 0",
        "received  #2 alice (via catch-up): text 1",
        "received  #3 alice (held until its thread was looked up): text 2",
    ]


async def test_explain_names_each_messages_files_and_redact_counts_them(
    store: SqliteStore,
) -> None:
    key = ConversationKey("slack", "T1", "D1")
    shot = Attachment("F1", "secret-plan.png", "image/png", 10, "https://files.example/F1")
    message = IncomingMessage(key, "D1:1", "U1", "alice", "look", attachments=(shot,))
    await store.ingest(message, 1_000.0, Timing(quiet_seconds=1.0, max_wait_seconds=5.0))
    shown = await explain_lines(store, key.id, 1_010.0)
    hidden = await explain_lines(store, key.id, 1_010.0, redact=True)
    assert shown is not None and hidden is not None
    assert shown[1].split("s  ", 1)[1] == "received  #1 alice: look [+ secret-plan.png]"
    assert hidden[1].split("s  ", 1)[1] == "received  #1 alice: [4 chars] [+ 1 file(s)]"


async def test_retry_requeues_a_failed_reply_which_is_then_posted_once(tmp_path: Path) -> None:
    db = tmp_path / "ops.db"
    await prepare(db)
    config = tmp_path / "c.toml"
    config.write_text(f'[storage]\nurl = "sqlite:///{db}"\n')

    def retry(target: str) -> CompletedProcess[str]:
        return burstbot(["retry", target, "--config", str(config)], tmp_path)

    refusals = {
        "r99": (1, "no reply r99"),
        "r1": (1, "reply r1 is sent, not failed: nothing to retry"),
        "test/w1/answered": (1, "no failed reply in test/w1/answered/"),
        "test/w1/nowhere": (1, "no conversation 'test/w1/nowhere/'"),
        "not-an-id": (2, ""),
    }
    for target, (code, line) in refusals.items():
        refused = retry(target)
        assert (refused.returncode, refused.stdout) == (code, ""), target
        assert line in refused.stderr and "Traceback" not in refused.stderr
    done = retry("test/w1/failed")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("re-queued r2 of test/w1/failed/")
    assert (
        retry("r2").stderr.strip() == "burstbot: reply r2 is pending, not failed: nothing to retry"
    )
    status = burstbot(["status", "--config", str(config)], tmp_path)
    assert "outbox 1 pending, 0 failed" in status.stdout

    store = SqliteStore(str(db))
    await store.open()
    try:
        clock = FakeClock(start=time.time())
        frontend = RecordingFrontend()
        engine = make_engine(store, clock, ScriptedReplier(), frontend)
        await engine.outbox.deliver_due()
        await engine.idle()
        await clock.advance(120)
        await engine.outbox.deliver_due()
        await engine.idle()
        assert [(p.reply_id, p.text) for p in frontend.posts] == [("r2", "hi")]
        replies = {r.id: r for r in await store.replies(FAILED.id)}
        assert (replies[2].state, replies[2].attempts) == ("sent", 0)
    finally:
        await store.close()


def test_relative_times_read_in_the_unit_that_fits() -> None:
    """A token that lives twelve hours reads `in 12.0 h`, not `in 43170.0s`."""
    now = 1_000_000.0
    spans = [1.25, -3.0, 3585.2, -7199.0, 43_170.0, 10 * 86_400.0]
    assert [relative(now + span, now) for span in spans] == [
        "in 1.2s", "3.0s ago", "in 60 min", "120 min ago", "in 12.0 h", "in 10.0 days",
    ]  # fmt: skip
    assert relative(None, now) == "-"
