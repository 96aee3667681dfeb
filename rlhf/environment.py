"""TextEnvironment: a minimal tool-use environment for PPO, in the spirit of TRL's.

The model writes `<request><ToolName>query<call>`; the environment runs tools[ToolName](query) and
appends `<response>result</response>`; the model continues, until it writes `<submit>` (or EOS, or
stops without a call) or max_turns calls were made. Tool output is text the model did not choose, so
its tokens get mask 0: PPOTrainer.step(..., response_masks=masks) keeps them in the attention but out
of every loss, log-prob and KL.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

REQUEST, CALL, RESPONSE, RESPONSE_END, SUBMIT = "<request>", "<call>", "<response>", "</response>", "<submit>"
_CALL_PATTERN = re.compile(re.escape(REQUEST) + r"<([^<>]+)>(.*?)" + re.escape(CALL) + r"\s*$", re.DOTALL)


@dataclass
class Episode:
    """One query's interaction: token segments (model's or tool's) and what happened."""

    query: str
    query_ids: torch.Tensor
    segments: list[tuple[torch.Tensor, int]] = field(default_factory=list)  # (tokens, 1 model / 0 tool)
    tool_calls: list[tuple[str, str, str]] = field(default_factory=list)  # (tool, query, result)
    done: bool = False

    @property
    def response_ids(self) -> torch.Tensor:
        return torch.cat([s for s, _ in self.segments]) if self.segments else torch.zeros(0, dtype=torch.long)

    @property
    def mask(self) -> torch.Tensor:
        return torch.cat([torch.full((len(s),), m, dtype=torch.long) for s, m in self.segments]) if self.segments \
            else torch.zeros(0, dtype=torch.long)


class TextEnvironment:
    def __init__(
        self,
        model,
        tokenizer,
        tools: dict[str, Callable[[str], str]],
        reward_fn: Callable[[list[str]], Sequence[float]],
        prompt: str,
        max_turns: int = 4,
        max_tool_response: int = 100,
        max_new_tokens: int = 32,
        generation_kwargs: dict | None = None,
    ) -> None:
        if max_turns < 1:
            raise ValueError(f"TextEnvironment: max_turns={max_turns} must be at least 1")
        self.model, self.tokenizer, self.tools, self.reward_fn = model, tokenizer, dict(tools), reward_fn
        self.prompt, self.max_turns, self.max_tool_response = prompt, max_turns, max_tool_response
        self.max_new_tokens = max_new_tokens
        self.generation_kwargs = {"do_sample": True, "top_k": 0, "top_p": 1.0, **(generation_kwargs or {})}

    def run(self, queries: Sequence[str]):
        """Play every query to the end; returns (query_ids, response_ids, masks, rewards, episodes)."""
        episodes = [Episode(q, self._encode(self.prompt + q)) for q in queries]
        for episode in episodes:
            for _ in range(self.max_turns + 1):  # max_turns tool calls, then one last chance to submit
                self._turn(episode)
                if episode.done:
                    break
                if len(episode.tool_calls) >= self.max_turns:
                    episode.done = True
                    break
        texts = [self.tokenizer.decode(e.response_ids) for e in episodes]
        scores = [float(s) for s in self.reward_fn(texts)]
        if len(scores) != len(episodes):
            raise ValueError(f"TextEnvironment: reward_fn returned {len(scores)} rewards for {len(episodes)} episodes")
        rewards = [torch.tensor(s) for s in scores]
        return [e.query_ids for e in episodes], [e.response_ids for e in episodes], [e.mask for e in episodes], \
            rewards, episodes

    def _turn(self, episode: Episode) -> None:
        """The model writes until <call>, <submit> or EOS; a call is answered by the tool."""
        context = torch.cat([episode.query_ids, episode.response_ids])
        new = self._generate(context)
        episode.segments.append((new, 1))
        text = self.tokenizer.decode(new)
        eos = self.tokenizer.eos_token_id
        if SUBMIT in text or (eos is not None and len(new) and int(new[-1]) == eos):
            episode.done = True
            return
        match = _CALL_PATTERN.search(text)
        if match is None:  # stopped without a call or a submit (e.g. ran out of tokens)
            episode.done = True
            return
        name, tool_query = match.group(1), match.group(2)
        result = self._run_tool(name, tool_query)
        episode.tool_calls.append((name, tool_query, result))
        episode.segments.append((self._encode(f"{RESPONSE}{result}{RESPONSE_END}"), 0))

    def _run_tool(self, name: str, query: str) -> str:
        tool = self.tools.get(name)
        if tool is None:
            return f"Unknown tool {name!r}; tools: {', '.join(sorted(self.tools))}"
        try:
            result = str(tool(query))
        except Exception as error:  # a tool failure is part of the episode, shown to the model like TRL does
            result = f"{type(error).__name__}: {error}"
        return result[: self.max_tool_response]

    def _encode(self, text: str) -> torch.Tensor:
        return torch.tensor(self.tokenizer.encode(text, add_special_tokens=False), dtype=torch.long)

    @torch.no_grad()
    def _generate(self, context: torch.Tensor) -> torch.Tensor:
        """New tokens after `context`, stopping at <call> or <submit> (transformers' stop_strings) or EOS."""
        parameter = next(iter(self.model.parameters()), None) if hasattr(self.model, "parameters") else None
        device = parameter.device if parameter is not None else torch.device("cpu")
        input_ids = context.unsqueeze(0).to(device)
        output = self.model.generate(
            input_ids=input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=self.max_new_tokens,
            stop_strings=[CALL, SUBMIT], tokenizer=self.tokenizer, pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=self.tokenizer.eos_token_id, **self.generation_kwargs,
        )
        new = output[0, input_ids.shape[1] :].cpu()
        eos = self.tokenizer.eos_token_id
        if eos is not None and (new == eos).any():
            new = new[: int((new == eos).nonzero()[0]) + 1]  # keep the first EOS, drop padding after it
        return new
