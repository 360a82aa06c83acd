"""Proposers: where candidate programs come from (an LLM, offline mutation, a replay)."""

from __future__ import annotations

from .base import Proposal, Proposer, ProposerExhausted
from .llm import LLMProposer
from .mutate import MutationProposer, Tunable, TuneSyntaxError, parse_tunables, set_tunables
from .replay import ReplayProposer

__all__ = [
    "LLMProposer",
    "MutationProposer",
    "Proposal",
    "Proposer",
    "ProposerExhausted",
    "ReplayProposer",
    "Tunable",
    "TuneSyntaxError",
    "parse_tunables",
    "set_tunables",
]
