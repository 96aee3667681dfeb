import types

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rlhf.configs import PPOConfig
from rlhf.environment import TextEnvironment
from rlhf.ppo import PPOTrainer
from rlhf.value_head import AutoModelForCausalLMWithValueHead

EOS = 0


class CharTokenizer:
    """One token per character (id = ord), EOS = pad = 0."""

    eos_token_id = pad_token_id = EOS

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(int(i)) for i in ids if int(i) != EOS)


class ScriptedModel:
    """Answers each generate() call with the next scripted text, as a causal LM's generate would."""

    def __init__(self, script):
        self.script, self.calls = list(script), []

    def generate(self, input_ids, attention_mask=None, **kwargs):
        assert kwargs["stop_strings"] == ["<call>", "<submit>"]
        self.calls.append(CharTokenizer().decode(input_ids[0]))
        new = torch.tensor([CharTokenizer().encode(self.script.pop(0))])
        return torch.cat([input_ids, new], dim=1)


def calculator(expression: str) -> str:
    a, b = expression.split("+")
    return str(int(a) + int(b))


def test_tool_call_then_submit_masks_the_tool_output():
    model = ScriptedModel(["<request><Calc>2+3<call>", " so 5<submit>"])
    env = TextEnvironment(model, CharTokenizer(), {"Calc": calculator},
                          reward_fn=lambda texts: [1.0 if "5<submit>" in t else 0.0 for t in texts], prompt="Q: ")
    queries, responses, masks, rewards, episodes = env.run(["2+3?"])
    assert CharTokenizer().decode(queries[0]) == "Q: 2+3?"
    text = CharTokenizer().decode(responses[0])
    assert text == "<request><Calc>2+3<call><response>5</response> so 5<submit>"
    # the model's second turn saw the tool's answer
    assert model.calls[1] == "Q: 2+3?<request><Calc>2+3<call><response>5</response>"
    tool_part = "<response>5</response>"
    start = text.index(tool_part)
    expected = [1] * start + [0] * len(tool_part) + [1] * len(" so 5<submit>")
    assert masks[0].tolist() == expected
    assert rewards[0].item() == 1.0 and episodes[0].tool_calls == [("Calc", "2+3", "5")]


def test_unknown_tool_failing_tool_and_max_turns():
    def broken(query):
        raise RuntimeError("no network")

    model = ScriptedModel(["<request><Search>x<call>", "<request><Broken>y<call>", "<request><Calc>1+1<call>"])
    env = TextEnvironment(model, CharTokenizer(), {"Calc": calculator, "Broken": broken},
                          reward_fn=lambda texts: [0.0] * len(texts), prompt="", max_turns=2)
    _, responses, masks, _, episodes = env.run(["q"])
    calls = episodes[0].tool_calls
    assert [c[0] for c in calls] == ["Search", "Broken"]  # the episode ends after max_turns=2 calls
    assert calls[0][2] == "Unknown tool 'Search'; tools: Broken, Calc"
    assert calls[1][2] == "RuntimeError: no network"
    assert len(model.script) == 1  # the third scripted turn was never requested
    assert len(masks[0]) == len(responses[0]) and 0 < int(masks[0].sum()) < len(masks[0])


def test_episode_ends_at_eos_and_reward_count_is_checked():
    model = ScriptedModel(["no tools needed\x00\x00"])
    env = TextEnvironment(model, CharTokenizer(), {}, reward_fn=lambda texts: [], prompt="")
    with pytest.raises(ValueError, match="0 rewards for 1 episodes"):
        env.run(["q"])
    model = ScriptedModel(["no tools needed\x00\x00"])
    env = TextEnvironment(model, CharTokenizer(), {}, reward_fn=lambda texts: [len(t) for t in texts], prompt="")
    _, responses, masks, rewards, _ = env.run(["q"])
    assert len(responses[0]) == len("no tools needed") + 1 and masks[0].tolist() == [1] * len(responses[0])
    assert rewards[0].item() == len("no tools needed")


def test_ppo_step_takes_the_environment_masks():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                         bos_token_id=1, eos_token_id=EOS, pad_token_id=EOS)
    policy = AutoModelForCausalLMWithValueHead(LlamaForCausalLM(config))
    scripts = [["<request><Calc>2+3<call>", "5<submit>"], ["<request><Calc>1+1<call>", "3<submit>"]]
    batch = [[], [], [], []]
    for script in scripts:
        env = TextEnvironment(ScriptedModel(script), CharTokenizer(), {"Calc": calculator},
                              reward_fn=lambda texts: [float("5<submit>" in t) for t in texts], prompt="Q:")
        for part, values in zip(batch, env.run(["sum"])[:4]):
            part.extend(values)
    queries, responses, masks, rewards = batch
    trainer = PPOTrainer(PPOConfig(batch_size=2, mini_batch_size=2, ppo_epochs=1), policy, None,
                         types.SimpleNamespace(pad_token_id=EOS, eos_token_id=EOS))
    assert trainer._layout(queries, responses, masks).mask[0, : len(masks[0])].tolist() == masks[0].float().tolist()
    stats = trainer.step(queries, responses, rewards, response_masks=masks)
    # only model-written tokens count: 24 + 9 = 33 per episode ("<request><Calc>2+3<call>" and "5<submit>")
    assert stats["tokens/responses_len_mean"] == 33.0
    assert stats["objective/kl"] == pytest.approx(0.0, abs=1e-5)


def test_trl_011_arguments_and_text_history():
    from rlhf import TextHistory
    from rlhf.extras import BestOfNSampler
    from rlhf.samplers import BestOfNSampler as ours

    from rlhf.extras.best_of_n_sampler import BestOfNSampler as by_module_path

    assert BestOfNSampler is ours is by_module_path  # TRL 0.11's `from trl.extras(.best_of_n_sampler) import ...`

    class Calc:  # TRL names tools given as a list by their class
        def __call__(self, expression):
            return calculator(expression) * 10  # "5555555555": cut to max_tool_reponse characters

    model = ScriptedModel(["<request><Calc>2+3<call>", " so 5<submit>"])
    env = TextEnvironment(model, CharTokenizer(), [Calc()], reward_fn=lambda texts, bonus: [bonus] * len(texts),
                          prompt="Q: ", max_tool_reponse=4)
    _, _, masks, rewards, histories = env.run(["2+3?"], bonus=2.0)  # reward kwargs reach reward_fn
    history = histories[0]
    assert isinstance(history, TextHistory) and history.completed and not history.truncated
    assert history.text == "Q: 2+3?<request><Calc>2+3<call><response>5555</response> so 5<submit>"
    assert history.system_spans == [True, False, True, False] and history.last_text_segment == " so 5<submit>"
    query, response, mask = history.split_query_response_tokens()
    assert CharTokenizer().decode(query) == "Q: 2+3?" and torch.equal(mask, masks[0]) and len(response) == len(mask)
    assert history.reward == rewards[0].item() == 2.0 and history.tool_calls == [("Calc", "2+3", "5555")]
    # max_length: an episode past 12 tokens (query 7 + the first turn's 24) ends there, truncated
    model = ScriptedModel(["<request><Calc>2+3<call>", " so 5<submit>"])
    env = TextEnvironment(model, CharTokenizer(), {"Calc": calculator}, reward_fn=lambda t: [0.0] * len(t),
                          prompt="Q: ", max_length=12)
    histories = env.run(["2+3?"])[4]
    assert histories[0].truncated and histories[0].completed and len(model.script) == 1
    with pytest.raises(ValueError, match="a segment needs at least one token"):
        history.append_segment("x", torch.zeros(0, dtype=torch.long))
