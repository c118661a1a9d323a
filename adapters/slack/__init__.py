"""Slack front end on Bolt: Socket Mode or HTTP mode, idempotent posting, mrkdwn output."""

from adapters.slack.app import SlackFrontend, build_slack_frontend

__all__ = ["SlackFrontend", "build_slack_frontend"]
