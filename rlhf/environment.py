"""TextEnvironment: a minimal tool-use environment for PPO, in the spirit of TRL's.

The model writes `<request><ToolName>query<call>`; the environment runs tools[ToolName](query) and
appends `<response>result</response>`; the model continues, until it writes `<submit>` (or EOS, or
stops without a call) or max_turns calls were made. Tool output is text the model did not choose, so
its tokens get mask 0: PPOTrainer.step(..., response_masks=masks) keeps them in the attention but out
of every loss, log-prob and KL.

TRL 0.11's API is kept: `TextEnvironment(..., max_tool_reponse=, max_length=)` (its spelling), tools as a dict
or a list (named by class), `run(queries, **reward_kwargs)` returning TextHistory objects (text, tokens,
token_masks, spans, reward, completed, truncated, show_text()), plus `tool_calls` for each.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

REQUEST, CALL, RESPONSE, RESPONSE_END, SUBMIT = "<request>", "<call>", "<response>", "</response>", "<submit>"
_CALL_PATTERN = re.compile(re.escape(REQUEST) + r"<([^<>]+)>(.*?)" + re.escape(CALL) + r"\s*$", re.DOTALL)


class TextHistory:
    """TRL 0.11's record of one interaction: the text and tokens of each segment (the first one the query),
    which segments the system wrote (mask 0) and which the model (mask 1), the reward and how it ended."""

    def __init__(self, text: str, tokens: torch.Tensor, system: bool = True) -> None:
        self.system_spans: list[bool] = []
        self.text_spans: list[tuple[int, int]] = []
        self.token_spans: list[tuple[int, int]] = []
        self.token_masks = torch.zeros(0, dtype=torch.long, device=tokens.device)
        self.text = ""
        self.tokens = torch.zeros(0, dtype=torch.long, device=tokens.device)
        self.completed = self.truncated = False
        self.reward = 0.0
        self.tool_calls: list[tuple[str, str, str]] = []  # ours: (tool, query, result) per call
        self.append_segment(text, tokens, system=system)

    def append_segment(self, text: str, tokens: torch.Tensor, system: bool = True) -> None:
        # TRL also refuses empty text; a segment of only special tokens decodes to "" and is still a segment here.
        if len(tokens) == 0:
            raise ValueError("TextHistory.append_segment: a segment needs at least one token")
        self.text_spans.append((len(self.text), len(self.text) + len(text)))
        self.text += text
        self.system_spans.append(system)
        start = len(self.tokens)
        self.tokens = torch.cat([self.tokens, tokens.long()])
        self.token_masks = torch.cat([self.token_masks, torch.full_like(tokens.long(), 0 if system else 1)])
        self.token_spans.append((start, len(self.tokens)))

    def complete(self, truncated: bool = False) -> None:
        self.completed, self.truncated = True, truncated

    @property
    def last_text_segment(self) -> str:
        start, end = self.text_spans[-1]
        return self.text[start:end]

    def split_query_response_tokens(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(query tokens, response tokens, response mask): the first segment is the query."""
        split = self.token_spans[0][1]
        return self.tokens[:split], self.tokens[split:], self.token_masks[split:]

    def show_text(self, show_legend: bool = False) -> None:
        """Print the text with the system's segments in [brackets] and the reward (TRL colours them with rich)."""
        parts = [self.text[a:b] if i == 0 or not system else f"[{self.text[a:b]}]"
                 for i, ((a, b), system) in enumerate(zip(self.text_spans, self.system_spans))]
        print("".join(parts) + f"\n\nReward: {self.reward}")
        if show_legend:
            print("(query | [system/tool output] | model output)")


@dataclass
class Episode:
    """One query's interaction: token segments (model's or tool's) and what happened."""

    query: str
    query_ids: torch.Tensor
    segments: list[tuple[torch.Tensor, int]] = field(default_factory=list)  # (tokens, 1 model / 0 tool)
    tool_calls: list[tuple[str, str, str]] = field(default_factory=list)  # (tool, query, result)
    done: bool = False
    truncated: bool = False

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
        tools: dict[str, Callable[[str], str]] | Sequence[Callable[[str], str]],
        reward_fn: Callable[[list[str]], Sequence[float]],
        prompt: str,
        max_turns: int = 4,
        max_tool_response: int = 100,
        max_new_tokens: int = 32,
        generation_kwargs: dict | None = None,
        max_length: int | None = None,
        max_tool_reponse: int | None = None,
    ) -> None:
        """`tools`: name -> callable, or a list of tool objects named by their class (as TRL). `max_length`:
        tokens per episode (query + response); an episode past it ends, truncated (TRL's). `max_tool_reponse`
        is TRL 0.11's spelling of max_tool_response (characters of a tool's answer kept)."""
        if max_turns < 1:
            raise ValueError(f"TextEnvironment: max_turns={max_turns} must be at least 1")
        if max_length is not None and max_length < 1:
            raise ValueError(f"TextEnvironment: max_length={max_length} must be at least 1 (or None)")
        if max_tool_reponse is not None:
            max_tool_response = max_tool_reponse
        if not isinstance(tools, dict):
            tools = {type(tool).__name__: tool for tool in tools}
        self.model, self.tokenizer, self.tools, self.reward_fn = model, tokenizer, dict(tools), reward_fn
        self.prompt, self.max_turns, self.max_tool_response = prompt, max_turns, max_tool_response
        self.max_new_tokens, self.max_length = max_new_tokens, max_length
        self.generation_kwargs = {"do_sample": True, "top_k": 0, "top_p": 1.0, **(generation_kwargs or {})}

    def run(self, queries: Sequence[str], **reward_kwargs):
        """Play every query to the end; returns (query_ids, response_ids, masks, rewards, histories): one
        TextHistory per query (TRL's), with its tool_calls. `reward_kwargs` go to reward_fn (as TRL)."""
        episodes = [Episode(q, self._encode(self.prompt + q)) for q in queries]
        for episode in episodes:
            for _ in range(self.max_turns + 1):  # max_turns tool calls, then one last chance to submit
                self._turn(episode)
                if self.max_length is not None and len(episode.query_ids) + len(episode.response_ids) > self.max_length:
                    episode.done = episode.truncated = True
                if episode.done:
                    break
                if len(episode.tool_calls) >= self.max_turns:
                    episode.done = True
                    break
        texts = [self.tokenizer.decode(e.response_ids) for e in episodes]
        scores = [float(s) for s in self.reward_fn(texts, **reward_kwargs)]
        if len(scores) != len(episodes):
            raise ValueError(f"TextEnvironment: reward_fn returned {len(scores)} rewards for {len(episodes)} episodes")
        rewards = [torch.tensor(s) for s in scores]
        histories = [self._history(e, score) for e, score in zip(episodes, scores)]
        return [e.query_ids for e in episodes], [e.response_ids for e in episodes], [e.mask for e in episodes], \
            rewards, histories

    def _history(self, episode: Episode, reward: float) -> TextHistory:
        history = TextHistory(self.prompt + episode.query, episode.query_ids, system=True)
        for tokens, by_model in episode.segments:
            if len(tokens):
                history.append_segment(self.tokenizer.decode(tokens), tokens, system=not by_model)
        history.tool_calls, history.reward = list(episode.tool_calls), reward
        history.complete(truncated=episode.truncated)
        return history

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
