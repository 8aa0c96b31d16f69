"""The architecture choices of DuSell & Cotterell (2025), each checked on a built model.

Every test recomputes something by hand from the paper's formulas (§4.1, App. C–D) or from
what the authors' code computes (``docs/design/authors-code.md``), reading only the
parameters of a built model, or inspects the statistics of the built parameters. ``docs/audit.md``
maps each row of the audit table to the test here that pins it.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stacklm.models import transformer
from stacklm.models.dropout import Dropout, ReLUDropout
from stacklm.models.options import ModelOptions, ReferenceBehaviour
from stacklm.models.recurrent import RecurrentLanguageModel
from stacklm.models.registry import ARCHITECTURES, build_model
from stacklm.models.stack_interface import SuperpositionInterface, VectorNondeterministicInterface
from stacklm.models.transformer import CausalSelfAttention, StackAttention, Transformer
from stacklm.stacks.superposition import NOOP_INDEX, POP_INDEX, PUSH_INDEX

V = 7  # six tokens and EOS
TOKENS = torch.tensor([[0, 3, 5, 1, 2, 4], [5, 5, 0, 2, 1, 3]])
AUTHORS = ReferenceBehaviour(pushed_vector="raw", initialization="reference")
PAPER_TEXT = ReferenceBehaviour(pushed_vector="sigmoid", initialization="paper")


def built(name: str, width: int = 16, dropout: float = 0.0, reference: ReferenceBehaviour = AUTHORS, seed: int = 0,
          vocabulary_size: int = V) -> Any:
    model = build_model(name, vocabulary_size, options=ModelOptions(width=width, dropout=dropout, reference=reference),
                        generator=torch.Generator().manual_seed(seed))
    return model.double().eval()


# --- independent re-implementations ---------------------------------------------------------


def layer_norm(x: Tensor, norm: nn.LayerNorm) -> Tensor:
    mean = x.mean(-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(variance + 1e-5) * norm.weight + norm.bias


def positional_encoding(length: int, width: int) -> Tensor:
    """Vaswani et al.: PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(p / 10000^(2i/d))."""
    rows = []
    for p in range(length):
        row = []
        for j in range(width):
            angle = p / 10000 ** ((j - j % 2) / width)
            row.append(math.sin(angle) if j % 2 == 0 else math.cos(angle))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64)


def attention(x: Tensor, module: CausalSelfAttention, heads: int) -> Tensor:
    """Multi-head scaled dot-product attention with a causal mask, position by position."""
    q = x @ module.query.weight.T + module.query.bias
    k = x @ module.key.weight.T + module.key.bias
    v = x @ module.value.weight.T + module.value.bias
    size = x.size(-1) // heads
    batch, length, _ = x.shape
    out = torch.zeros_like(x)
    for b in range(batch):
        for h in range(heads):
            columns = slice(h * size, (h + 1) * size)
            for i in range(length):
                scores = torch.stack([q[b, i, columns] @ k[b, j, columns] / math.sqrt(size) for j in range(i + 1)])
                weights = torch.softmax(scores, 0)
                out[b, i, columns] = sum(weights[j] * v[b, j, columns] for j in range(i + 1))
    return out @ module.out.weight.T + module.out.bias


def feedforward(x: Tensor, block: Any) -> Tensor:
    ff = block.feedforward
    return torch.relu(x @ ff.expand.weight.T + ff.expand.bias) @ ff.project.weight.T + ff.project.bias


class HandSuperposition:
    """Joulin & Mikolov's stack, one batch element, as a list of rows (top first)."""

    def __init__(self, size: int) -> None:
        self.rows: list[Tensor] = []
        self.size = size

    def step(self, push: Tensor, pop: Tensor, noop: Tensor, vector: Tensor) -> Tensor:
        old = self.rows
        zero = vector.new_zeros(self.size)
        below = lambda k: old[k] if 0 <= k < len(old) else zero  # noqa: E731
        self.rows = [push * (vector if k == 0 else old[k - 1]) + noop * below(k) + pop * below(k + 1) for k in range(len(old) + 1)]
        return self.rows[0]


def superposition_readings(probabilities: Tensor, pushed: Tensor) -> Tensor:
    """r_1 … r_n of the superposition stack for actions (B, n, 3) and vectors (B, n, m)."""
    batch, length, size = pushed.shape
    readings = pushed.new_zeros(batch, length, size)
    for b in range(batch):
        stack = HandSuperposition(size)
        for t in range(length):
            a = probabilities[b, t]
            readings[b, t] = stack.step(a[PUSH_INDEX], a[POP_INDEX], a[NOOP_INDEX], pushed[b, t])
    return readings


def hand_transformer(model: Transformer, tokens: Tensor, heads: int = 4, sublayer: Callable[..., Tensor] | None = None) -> Tensor:
    """App. C.3: BOS, √d-scaled embedding + sinusoidal PE, pre-norm layers, final LN, tied output."""
    d = model.config.width
    embedding = model.embedding.matrix()
    inputs = torch.cat([torch.full((tokens.size(0), 1), V), tokens], dim=1)  # BOS = index V
    x = math.sqrt(d) * embedding[inputs] + positional_encoding(inputs.size(1), d)
    for block in model.blocks:
        normed = layer_norm(x, block.sublayer_norm)
        if isinstance(block.sublayer, CausalSelfAttention):
            x = x + attention(normed, block.sublayer, heads)
        else:
            assert sublayer is not None
            x = x + sublayer(normed, block.sublayer)
        x = x + feedforward(layer_norm(x, block.feedforward_norm), block)
    return layer_norm(x, model.final_norm) @ embedding[:V].T  # no output bias


# --- transformer (App. C.3) ------------------------------------------------------------------


def test_transformer_equals_the_appendix_c3_computation_by_hand() -> None:
    """Scaled embedding, sinusoidal positions, BOS, pre-norm, 4 causal heads, FFN, final LN, tied output."""
    model = built("Tf")
    assert isinstance(model, Transformer)
    expected = hand_transformer(model, TOKENS)
    torch.testing.assert_close(model(TOKENS), expected, rtol=1e-10, atol=1e-10)
    # the hand computation tells apart the choices it pins:
    assert not torch.allclose(model(TOKENS), hand_transformer(model, TOKENS, heads=2), atol=1e-4)


def test_feedforward_has_2d_hidden_units_and_attention_4_heads_in_every_paper_transformer() -> None:
    for name in ("Tf", "Tf+Sup", "Tf+Nd", "Tf+Sup+Sup", "Tf+Nd+Nd"):
        model = built(name, width=24)
        assert len(model.blocks) == 5
        for block in model.blocks:
            assert (block.feedforward.expand.in_features, block.feedforward.expand.out_features) == (24, 48)
            assert (block.feedforward.project.in_features, block.feedforward.project.out_features) == (48, 24)
            if isinstance(block.sublayer, CausalSelfAttention):
                assert block.sublayer.num_heads == 4


def test_scaled_embedding_and_sinusoidal_encoding_are_the_first_layers_input() -> None:
    model = built("Tf")
    seen: list[Tensor] = []
    model.blocks[0].register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    model(TOKENS)
    inputs = torch.cat([torch.full((2, 1), V), TOKENS], dim=1)
    expected = 4.0 * model.embedding.token_weight[inputs] + positional_encoding(7, 16)  # √16 = 4
    torch.testing.assert_close(seen[0], expected, rtol=1e-12, atol=1e-12)


def test_bos_output_predicts_the_first_token_and_every_output_is_causal() -> None:
    for name in ("Tf", "Tf+Sup", "Tf+Nd", "LSTM+Nd+R", "RNN+Sup"):
        model = built(name, width=8)
        logits = model(TOKENS)
        assert logits.shape == (2, TOKENS.size(1) + 1, V)
        for position in range(TOKENS.size(1)):
            changed = TOKENS.clone()
            changed[:, position] = (changed[:, position] + 1) % (V - 1)
            other = model(changed)
            # y_t depends on w_1 … w_t only: positions ≤ position are unchanged, the next one is not
            torch.testing.assert_close(other[:, : position + 1], logits[:, : position + 1], rtol=1e-12, atol=1e-12)
            assert not torch.allclose(other[:, position + 1], logits[:, position + 1]), (name, position)
        empty = model(TOKENS[:, :0])
        torch.testing.assert_close(empty[:, 0], logits[:, 0], rtol=1e-12, atol=1e-12)  # y_0 from BOS / H_0 alone


@pytest.mark.parametrize("name", ["Tf", "Tf+Nd", "LSTM", "LSTM+Sup+R", "RNN+Nd"])
def test_output_is_the_tied_embedding_without_bias(name: str) -> None:
    model = built(name, width=8)
    names = [parameter_name for parameter_name, _ in model.named_parameters()]
    assert not any("output" in n and "bias" in n for n in names)
    with torch.no_grad():
        model.embedding.token_weight.zero_()
    assert model(TOKENS).abs().max().item() == 0.0  # logits = E y': no separate output matrix, no bias
    model = built(name, width=8)
    before = model(TOKENS)
    with torch.no_grad():
        model.embedding.token_weight[3] += torch.linspace(-1, 2, model.embedding.token_weight.size(1), dtype=torch.float64)  # symbol 3's input row is also its output row
    after = model(TOKENS)
    assert not torch.allclose(after[:, 0, 3], before[:, 0, 3])  # y_0 reads no token, yet symbol 3's logit moved
    if isinstance(model, RecurrentLanguageModel):  # y_0 = E h_0: only symbol 3's logit moved
        torch.testing.assert_close(after[:, 0, :3], before[:, 0, :3], rtol=0, atol=0)


# --- stack attention (App. C.4; docs/design/authors-code.md#stack-attention-layers) ----------


def superposition_sublayer(pushed_vector: str) -> Callable[[Tensor, StackAttention], Tensor]:
    def compute(x: Tensor, sublayer: StackAttention) -> Tensor:
        interface = sublayer.interface
        assert isinstance(interface, SuperpositionInterface)
        probabilities = torch.softmax(x @ interface.action_layer.weight.T, -1)  # a'_t = W_a x^LN
        pushed = x @ interface.push_layer.weight.T
        if pushed_vector == "sigmoid":
            pushed = torch.sigmoid(pushed)  # paper App. C.4: v_t = σ(W_v x^LN); the code pushes W_v x^LN
        return superposition_readings(probabilities, pushed) @ sublayer.output_layer.weight.T  # y_t = W_y r_t
    return compute


@pytest.mark.parametrize("reference", [AUTHORS, PAPER_TEXT], ids=["authors", "paper-text"])
@pytest.mark.parametrize("name", ["Tf+Sup", "Tf+Sup+Sup"])
def test_superposition_stack_attention_equals_the_hand_computation(name: str, reference: ReferenceBehaviour) -> None:
    model = built(name, reference=reference)
    expected = hand_transformer(model, TOKENS, sublayer=superposition_sublayer(reference.pushed_vector))
    torch.testing.assert_close(model(TOKENS), expected, rtol=1e-10, atol=1e-10)
    other = "raw" if reference.pushed_vector == "sigmoid" else "sigmoid"
    assert not torch.allclose(model(TOKENS), hand_transformer(model, TOKENS, sublayer=superposition_sublayer(other)), atol=1e-4)


def test_stack_attention_layers_have_no_bias_and_sit_in_the_papers_layers() -> None:
    for name, positions in (("Tf+Sup", [2]), ("Tf+Nd", [2]), ("Tf+Sup+Sup", [1, 3]), ("Tf+Nd+Nd", [1, 3])):
        model = built(name, width=8)
        stack_layers = [index for index, block in enumerate(model.blocks) if isinstance(block.sublayer, StackAttention)]
        assert stack_layers == positions
        for index in positions:
            sublayer = model.blocks[index].sublayer
            assert sublayer.output_layer.bias is None
            assert sublayer.interface.action_layer.bias is None and sublayer.interface.push_layer.bias is None


@pytest.mark.parametrize("reference", [AUTHORS, PAPER_TEXT], ids=["authors", "paper-text"])
def test_nondeterministic_stack_attention_first_reading_by_hand(reference: ReferenceBehaviour) -> None:
    """At BOS the dVPDA starts in (q0, ⊥, v0) and one step can push or replace (never pop):

    r_1[r, y] = (e^{Δ⁺[q0,⊥→r,y]} v_1 + e^{Δ^R[q0,⊥→r,y]} v_0) / Σ_{r,y} (e^{Δ⁺} + e^{Δ^R}),
    v_1 = exp(W_v x^LN) (the code; the paper's text: σ(W_v x^LN)), v_0 = σ(w_0).
    """
    model = built("Tf+Nd", reference=reference)
    sublayer = model.blocks[2].sublayer
    interface = sublayer.interface
    assert isinstance(interface, VectorNondeterministicInterface)
    seen: list[tuple[Tensor, Tensor]] = []
    sublayer.register_forward_hook(lambda module, args, output: seen.append((args[0], output)))
    model(TOKENS)
    x, output = seen[0]
    first = x[:, 0]  # x^LN at BOS, (B, d)
    actions = interface.actions(first)
    linear = first @ interface.push_layer.weight.T
    log_pushed = linear if reference.pushed_vector == "raw" else F.logsigmoid(linear)
    torch.testing.assert_close(actions.pushed, log_pushed, rtol=0, atol=0)
    logits = first @ interface.action_layer.weight.T
    assert sorted(torch.cat([actions.push.flatten(1), actions.replace.flatten(1), actions.pop.flatten(1)], 1)[0].tolist()) == sorted(logits[0].tolist())
    bottom = torch.sigmoid(interface.stack.bottom_logits)  # v0 = σ(w0), (m,)
    reading = first_dvpda_reading(actions.push[:, 0, 0].exp(), actions.replace[:, 0, 0].exp(), log_pushed.exp(), bottom)
    torch.testing.assert_close(output[:, 0], reading @ sublayer.output_layer.weight.T, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("reference", [AUTHORS, PAPER_TEXT], ids=["authors", "paper-text"])
def test_nondeterministic_stack_attention_equals_brute_force_runs(reference: ReferenceBehaviour) -> None:
    """Every position of Tf+Nd's stack sublayer: y_t = W_y r_t, r_t of eq. 6 summed over all PDA
    runs (``tests/stacks/pda_runs.py``), driven by Δ = exp(W_a x^LN) and v_t = exp(W_v x^LN)
    (the code) or σ(W_v x^LN) (the paper's text), starting from (q0, ⊥, σ(w_0))."""
    from tests.stacks.pda_runs import follow_runs
    from stacklm.stacks.vector_nondeterministic import VectorNondeterministicActions

    model = built("Tf+Nd", width=8, reference=reference)
    sublayer = model.blocks[2].sublayer
    interface = sublayer.interface
    seen: list[tuple[Tensor, Tensor]] = []
    sublayer.register_forward_hook(lambda module, args, output: seen.append((args[0], output)))
    tokens = TOKENS[:, :3]
    model(tokens)
    x, output = seen[0]  # x^LN (B, 4, d): BOS and three tokens
    linear = x @ interface.push_layer.weight.T
    log_pushed = linear if reference.pushed_vector == "raw" else F.logsigmoid(linear)
    actions = VectorNondeterministicActions.from_logits(x @ interface.action_layer.weight.T, log_pushed, 3, 3)
    bottom = torch.sigmoid(interface.stack.bottom_logits)
    for b in range(tokens.size(0)):
        history = follow_runs(actions.push[b].exp(), actions.replace[b].exp(), actions.pop[b].exp(), bottom_replaceable=True,
                              pushed=actions.pushed[b].exp(), bottom=bottom)
        readings = torch.stack([(sums.vector / sums.weight.sum()).flatten() for sums in history[1:]])  # r_1 … r_4
        torch.testing.assert_close(output[b], readings @ sublayer.output_layer.weight.T, rtol=1e-9, atol=1e-10)


# --- stack RNN and LSTM (§4.1, App. C.1–C.2) -------------------------------------------------


def hand_stack_rnn(model: RecurrentLanguageModel, tokens: Tensor) -> Tensor:
    """Eqs. 7–8 (with a superposition stack, or none): H_t = Recurrence(H_{t−1}, [x'_t ; r_{t−1}]), actions from h^(L)_t,
    y_t = E h^(L)_t, or E [h^(L)_t ; r_t] with +R; h_0 = tanh(w_0), c_0 = 0, r_0 = 0."""
    config = model.config
    interface = model.interface
    assert interface is None or isinstance(interface, SuperpositionInterface)
    embedding = model.embedding.matrix()
    batch = tokens.size(0)
    size = 0 if interface is None else interface.reading_size
    hidden = [torch.tanh(w).expand(batch, -1) for w in model.initial_hidden]
    cells = [torch.zeros_like(h) for h in hidden]
    stacks = [HandSuperposition(size) for _ in range(batch)]
    reading = embedding.new_zeros(batch, size)

    def output() -> Tensor:
        return torch.cat([hidden[-1], reading], -1) if config.reading_to_output else hidden[-1]

    outputs = [output()]
    for t in range(tokens.size(1)):
        layer_input = torch.cat([embedding[tokens[:, t]], reading], -1)
        for index, layer in enumerate(model.layers):
            z = layer_input @ layer.input_weight.T + hidden[index] @ layer.recurrent_weight.T + layer.bias
            if config.cell == "lstm":
                i, f, g, o = z.chunk(4, -1)
                cells[index] = torch.sigmoid(f) * cells[index] + torch.sigmoid(i) * torch.tanh(g)
                hidden[index] = torch.sigmoid(o) * torch.tanh(cells[index])
            else:
                hidden[index] = torch.tanh(z)
            layer_input = hidden[index]
        top = hidden[-1]
        if interface is None:
            outputs.append(output())
            continue
        probabilities = torch.softmax(top @ interface.action_layer.weight.T + interface.action_layer.bias, -1)
        pushed = torch.sigmoid(top @ interface.push_layer.weight.T + interface.push_layer.bias)  # σ in RNNs
        reading = torch.stack([stacks[b].step(*(probabilities[b, k] for k in (PUSH_INDEX, POP_INDEX, NOOP_INDEX)), pushed[b])
                               for b in range(batch)])
        outputs.append(output())
    return torch.stack(outputs, 1) @ embedding[:V].T


@pytest.mark.parametrize("reference", [AUTHORS, PAPER_TEXT], ids=["authors", "paper-text"])
@pytest.mark.parametrize("name", ["LSTM", "RNN", "LSTM+Sup", "LSTM+Sup+R", "RNN+Sup", "RNN+Sup+R"])
def test_stack_rnn_equals_the_section_4_1_computation_by_hand(name: str, reference: ReferenceBehaviour) -> None:
    model = built(name, width=6, reference=reference)
    assert len(model.layers) == 3
    torch.testing.assert_close(model(TOKENS), hand_stack_rnn(model, TOKENS), rtol=1e-10, atol=1e-10)


def test_plus_r_widens_the_embedding_to_d_plus_reading_size() -> None:
    for name, reading in (("LSTM+Sup+R", 50), ("LSTM+Nd+R", 45), ("RNN+Sup+R", 50)):
        model = built(name, width=6)
        assert model.embedding.matrix().shape == (V, 6 + reading)
        assert model.layers[0].input_weight.shape[1] == 6 + 2 * reading  # [x'_t ; r_{t−1}], x'_t of width d + r


def first_dvpda_reading(push: Tensor, replace: Tensor, vector: Tensor, bottom: Tensor) -> Tensor:
    """r_1 from (q0, ⊥, v0) after one step: push (r, y, v_1) or replace ⊥ (r, y, v0); (B, Q·S·m)."""
    total = (push + replace).sum((1, 2))  # (B,)
    reading = (push[..., None] * vector[:, None, None] + replace[..., None] * bottom) / total[:, None, None, None]
    return reading.flatten(1)


@pytest.mark.parametrize("reference", [AUTHORS, PAPER_TEXT], ids=["authors", "paper-text"])
def test_nondeterministic_stack_lstm_pushes_sigmoid_vectors_and_short_circuits_the_reading(reference: ReferenceBehaviour) -> None:
    """§4.1: v_t = σ(W_v h^(L)_t + b_v) under either option; +R: y_t = E [h^(L)_t ; r_t], with r_0
    the initial reading one-hot(q0, ⊥) ⊗ v0 and r_1 the reading after h^(L)_1's actions."""
    model = built("LSTM+Nd+R", width=6, reference=reference)
    interface = model.interface
    assert isinstance(interface, VectorNondeterministicInterface)
    embedding = model.embedding.matrix()
    bottom = torch.sigmoid(interface.stack.bottom_logits)  # v0 = σ(w0)
    initial = torch.zeros(3, 3, 5, dtype=torch.float64)
    initial[0, 0] = bottom
    h0 = torch.tanh(model.initial_hidden[-1]).expand(2, -1)
    logits = model(TOKENS)
    torch.testing.assert_close(logits[:, 0], torch.cat([h0, initial.flatten().expand(2, -1)], -1) @ embedding.T, rtol=1e-10, atol=1e-12)
    h1 = model.initial_state(2).next(TOKENS[:, 0]).hidden[-1]
    actions = interface.actions(h1)
    log_pushed = F.logsigmoid(h1 @ interface.push_layer.weight.T + interface.push_layer.bias)
    torch.testing.assert_close(actions.pushed, log_pushed, rtol=0, atol=0)
    reading = first_dvpda_reading(actions.push[:, 0, 0].exp(), actions.replace[:, 0, 0].exp(), log_pushed.exp(), bottom)
    torch.testing.assert_close(logits[:, 1], torch.cat([h1, reading], -1) @ embedding.T, rtol=1e-10, atol=1e-12)


# --- dropout (App. C.1–C.3, App. D) ----------------------------------------------------------


def test_every_dropout_rate_is_0_1_by_default() -> None:
    assert ModelOptions().dropout == 0.1
    for name in ("Tf", "Tf+Nd", "LSTM+Sup+R", "RNN"):
        model = build_model(name, V, options=ModelOptions(width=8))
        rates = [module.p for module in model.modules() if isinstance(module, nn.Dropout)]
        assert rates and set(rates) == {0.1}, name


def test_transformer_dropout_positions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Input (embedding + PE), each sublayer's output, the FFN's hidden units and the attention
    probabilities; not the final layer norm's output."""
    torch.manual_seed(0)
    model = built("Tf+Sup", dropout=0.5)
    eval_inputs: list[Tensor] = []
    handle = model.blocks[0].register_forward_pre_hook(lambda module, args: eval_inputs.append(args[0]))
    model(TOKENS)
    handle.remove()
    model.train()
    calls: dict[str, list[Tensor]] = {"input": [], "residual": [], "hidden": []}
    model.blocks[0].register_forward_pre_hook(lambda module, args: calls["input"].append(args[0]))
    add_norm = Dropout.add_norm
    sums: list[tuple[nn.LayerNorm, Tensor, Tensor]] = []  # each residual sum, with the norm read from it

    def recording_add_norm(module: Dropout, residual: Tensor, x: Tensor, norm: nn.LayerNorm) -> tuple[Tensor, Tensor]:
        calls["residual"].append(x)
        total, normed = add_norm(module, residual, x, norm)
        sums.append((norm, total, normed))
        return total, normed

    monkeypatch.setattr(Dropout, "add_norm", recording_add_norm)
    for block in model.blocks:
        block.feedforward.dropout.register_forward_hook(lambda module, args, output: calls["hidden"].append(output))
    rates: list[float] = []  # the attention probabilities' dropout
    for module in model.modules():
        if isinstance(module, CausalSelfAttention):
            module.dropout.register_forward_hook(lambda module, args, output: rates.append(module.p if module.training else 0.0))
    logits = model(TOKENS)
    dropped, kept = calls["input"][0], eval_inputs[0]
    assert bool(((dropped == 0) | torch.isclose(dropped, 2 * kept)).all()) and 0.3 < float((dropped == 0).double().mean()) < 0.7
    assert len(calls["residual"]) == 2 * 5  # after every sublayer: attention or stack, then FFN
    assert len(calls["hidden"]) == 5 and all(h.size(-1) == 32 and bool((h >= 0).all()) for h in calls["hidden"])  # Dropout(ReLU(W_1 x))
    assert all(isinstance(block.feedforward.dropout, ReLUDropout) and block.feedforward.dropout.p == 0.5 for block in model.blocks)
    assert rates == [0.5] * 4  # the four attention layers' probabilities (the stack layer has none)
    final_norm, total, normed = sums[-1]  # the last sublayer's sum, read by the final norm alone
    assert final_norm is model.final_norm
    torch.testing.assert_close(normed, model.final_norm(total))
    torch.testing.assert_close(logits, normed @ model.embedding.matrix()[:V].T, rtol=0, atol=0)  # no dropout before the output


def test_recurrent_dropout_positions() -> None:
    """Input embeddings, hidden states between layers, the last layer's output (with +R, [h ; r]);
    not the stack reading fed back and not the hidden state the actions are computed from."""
    model = built("LSTM+Sup+R", width=6, dropout=0.5).train()
    calls: list[Tensor] = []
    model.dropout.register_forward_hook(lambda module, args, output: calls.append(args[0]))
    n = TOKENS.size(1)
    model(TOKENS)
    shapes = [tuple(c.shape) for c in calls]
    assert shapes[0] == (2, n, 56)  # Dropout(x_t): the embedding of width d + r
    assert shapes[1] == (n, 2, 2, 6)  # between the 3 layers, at every step: the masks, drawn at once
    torch.testing.assert_close(calls[1], torch.ones(n, 2, 2, 6, dtype=calls[1].dtype), rtol=0, atol=0)
    assert shapes[-1] == (2, n + 1, 56)  # Dropout([h_t ; r_t]) before the tied output
    assert len(shapes) == 3
    torch.testing.assert_close(calls[0], model.embedding.matrix()[TOKENS], rtol=0, atol=0)


def test_recurrent_dropout_positions_without_a_stack() -> None:
    """Eqs. 7a, 7e, 7g: Dropout(x_t), Dropout(h^(ℓ)_t) for ℓ < L, Dropout(h^(L)_t) for t = 0 … n."""
    model = built("LSTM", width=6, dropout=0.5).train()
    calls: list[Tensor] = []
    model.dropout.register_forward_hook(lambda module, args, output: calls.append(args[0]))
    n = TOKENS.size(1)
    model(TOKENS)
    assert [tuple(c.shape) for c in calls] == [(2, n, 6), (2, n, 6), (2, n, 6), (2, n + 1, 6)]
    torch.testing.assert_close(calls[0], model.embedding.matrix()[TOKENS], rtol=0, atol=0)
    torch.testing.assert_close(calls[-1][:, 0], torch.tanh(model.initial_hidden[-1]).expand(2, -1), rtol=0, atol=0)  # y'_0


# --- initialization (App. D; docs/design/authors-code.md#initialization) ----------------------

RELU_GAIN = math.sqrt(2)


def uniform_rule() -> tuple[str, float]:
    return ("uniform", 0.1)


def xavier_rule(parameter: Tensor, gain: float) -> tuple[str, float]:
    fan_out, fan_in = parameter.shape
    return ("uniform", gain * math.sqrt(6 / (fan_in + fan_out)))


def expected_initialization(name: str, parameter: Tensor, architecture: str, initialization: str) -> tuple[str, float]:
    """The rule of App. D (``paper``) or of the authors' code (``reference``) for one parameter,
    written from the paper's and the reference's text: ("uniform", bound), ("zeros", 0), ("ones", 1)."""
    if name.endswith("norm.weight"):
        return ("ones", 1.0)
    if name.endswith("norm.bias"):
        return ("zeros", 0.0)
    if name in ("embedding.token_weight", "initial_hidden") or name.startswith("layers.") or name.endswith("bottom_logits"):
        return uniform_rule()  # embeddings, learned initial states, recurrent updates, w_0 of v_0 = σ(w_0)
    if ".sublayer.query." in name or ".sublayer.key." in name or ".sublayer.value." in name or ".sublayer.out." in name:
        return uniform_rule()  # standard scaled dot-product attention
    if ".feedforward." in name:
        layer = int(name.split(".")[1])
        stack_layer = "+" in architecture and layer in ((1, 3) if architecture.count("+") == 2 else (2,))
        if initialization == "reference" and not stack_layer:
            return uniform_rule()  # PyTorch's standard layer: all U(−0.1, 0.1) in the code
        if name.endswith(".bias"):
            return ("zeros", 0.0)
        return xavier_rule(parameter, RELU_GAIN if ".expand." in name else 1.0)
    if ".sublayer." in name:  # stack attention: W_a, W_v, W_y, Xavier in paper and code
        return xavier_rule(parameter, 1.0)
    if name.startswith("interface."):  # stack RNN action and pushed-vector layers
        if "Nd" in architecture and initialization == "reference":
            return uniform_rule()  # plain nn.Linear in the code
        if name.endswith(".bias"):
            return ("zeros", 0.0)
        return xavier_rule(parameter, 1.0)
    raise AssertionError(f"no rule for parameter {name}")


def check_distribution(name: str, parameter: Tensor, rule: tuple[str, float]) -> None:
    kind, value = rule
    if kind in ("zeros", "ones"):
        assert bool((parameter == value).all()), f"{name}: expected all {value}"
        return
    bound, count = value, parameter.numel()
    largest = parameter.abs().max().item()
    assert largest <= bound * (1 + 1e-6), f"{name}: |w| up to {largest:.4f} > bound {bound:.4f}"
    if count >= 40:  # P(max < 0.8 bound) = 0.8^count < 1e-3
        assert largest >= 0.8 * bound, f"{name}: |w| at most {largest:.4f}, bound {bound:.4f}"
    if count >= 500:
        std = parameter.std().item()
        assert abs(std - bound / math.sqrt(3)) < 0.1 * bound / math.sqrt(3), f"{name}: std {std:.4f}, U(±{bound:.4f}) has {bound / math.sqrt(3):.4f}"
        assert abs(parameter.mean().item()) < 4 * bound / math.sqrt(3 * count), f"{name}: mean {parameter.mean().item():.4f}"


INIT_ARCHITECTURES = ["Tf", "Tf+Sup", "Tf+Nd", "Tf+Sup+Sup", "Tf+Nd+Nd", "RNN", "RNN+Sup", "RNN+Nd+R", "LSTM", "LSTM+Sup",
                      "LSTM+Sup+R", "LSTM+Nd", "LSTM+Nd+R"]


@pytest.mark.parametrize("initialization", ["reference", "paper"])
@pytest.mark.parametrize("architecture", INIT_ARCHITECTURES)
def test_initialization_statistics_of_every_built_parameter(architecture: str, initialization: str) -> None:
    reference = ReferenceBehaviour(pushed_vector="raw", initialization=initialization)  # type: ignore[arg-type]
    model = build_model(architecture, 69, options=ModelOptions(width=64, reference=reference), generator=torch.Generator().manual_seed(1))
    for name, parameter in model.named_parameters():
        check_distribution(name, parameter.detach(), expected_initialization(name, parameter, architecture, initialization))


def test_the_initialization_check_tells_xavier_from_uniform() -> None:
    """The statistics above can fail: a Xavier FFN (bound 0.25) is not U(−0.1, 0.1), nor the reverse."""
    model = build_model("Tf", 69, options=ModelOptions(width=64, reference=ReferenceBehaviour(initialization="paper")),
                        generator=torch.Generator().manual_seed(1))
    weight = model.blocks[0].feedforward.expand.weight.detach()
    with pytest.raises(AssertionError):
        check_distribution("ffn", weight, uniform_rule())
    uniform = torch.empty(128, 64).uniform_(-0.1, 0.1, generator=torch.Generator().manual_seed(0))
    with pytest.raises(AssertionError):
        check_distribution("u", uniform, xavier_rule(uniform, RELU_GAIN))


def test_defaults_reproduce_the_authors_code() -> None:
    """The shipped defaults are the authors' code (issue 14): raw pushed vectors, the code's initialization."""
    assert ModelOptions().reference == AUTHORS
    model = build_model("Tf+Nd", V, options=ModelOptions(width=8))
    interface = model.blocks[2].sublayer.interface
    hidden = torch.randn(3, 8, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(interface.actions(hidden).pushed, hidden @ interface.push_layer.weight.T)


# --- sizing (§5; docs/design/authors-code.md#model-sizing) ------------------------------------


def reference_width(root: float, base: str) -> int:
    """rau's model-size: solve count(s) = budget for s (d = 4s for transformers), round s."""
    heads = 4 if base == "transformer" else 1
    return heads * round(root / heads)


@pytest.mark.parametrize("task", ["question-formation", "tense-reinflection-do", "tense-reinflection", "german-question-formation",
                                  "passivization", "question-formation-have", "german-passivization"])
def test_width_agrees_with_the_authors_rounding_and_count_is_near_200k(task: str) -> None:
    from stacklm.models.lexicon import task_vocabulary

    vocabulary_size = len(task_vocabulary(task))
    for name, architecture in ARCHITECTURES.items():
        if architecture.family != "bearing-syntactic-fruit" or architecture.syntax:
            continue
        sizing = architecture.sizing(vocabulary_size, ModelOptions(), 200_000)
        assert sizing.root is not None and sizing.width == reference_width(sizing.root, architecture.base), (task, name)
        model = build_model(name, vocabulary_size, options=ModelOptions(width=sizing.width))
        built_count = sum(p.numel() for p in model.parameters())
        assert built_count == sizing.parameters and abs(built_count - 200_000) < 12_000, (task, name, built_count)
