"""The one character-level LM trainer: the base model and every variant of its network, on the same windows.

    model, log = train_char_lm({**BASE_MODEL, "network": "gru", "model": GRUConfig().to_dict()})

Batches are random windows of the training text (`batches.random_windows`),
the loss is next-character cross-entropy, and every `eval_every` steps the log
records the validation loss, line by line (`evals.validation_loss`).  Only the
network differs between runs, named by config["network"]:

    tinygpt   lib.nn.models.TinyGPT         the base model (any size, any number of heads)
    post_ln   lib.nn.post_ln.PostLNGPT      LayerNorm after each sub-layer
    gru       lib.nn.recurrent.GRU...       one GRU layer, the same parameter budget
    moe       lib.nn.moe.MoEGPT             experts in place of the MLPs

With config["pool_kv_heads"] = g the run continues its parent (a trained TinyGPT) with the key/value heads
mean-pooled into g groups (`models.pool_kv_heads`): section 09's grouped-query uptraining.

With config["fact_world"] = N the text is a facts-only world of N people
(`world.fact_world`, `world.fact_text`) instead of the mini internet, and the
log records the share of them it recalls (`answers.fact_recall`) instead of
the validation loss: section 07's test of how many facts a model can hold.

config["stop_after"] = K stops after K steps of the same schedule (0: the initialisation), a snapshot
for the fine-tuning yardstick (`lib.recipes.yardstick`).

What else a run logs follows from its network and config: a mixture of experts
adds its balancing loss (config["balance"]) and logs each layer's routing; with
config["log_steps"] every row also carries each step's loss and the length of
the residual stream leaving the last block (section 02's LayerNorm runs).
"""

import torch

from lib.data import world
from lib.data.seeding import seed_everything
from lib.measure import answers, evals
from lib.nn.models import ModelConfig, TinyGPT, pool_kv_heads
from lib.nn.moe import MoEConfig, MoEGPT, with_capacity
from lib.nn.post_ln import PostLNGPT
from lib.nn.recurrent import GRUConfig, GRULanguageModel
from lib.objectives.batches import next_token_loss, random_windows
from lib.train import fingerprint
from lib.train.cache import trainer
from lib.train.loop import fit

NETWORKS = {"tinygpt": (TinyGPT, ModelConfig), "post_ln": (PostLNGPT, ModelConfig),
            "gru": (GRULanguageModel, GRUConfig), "moe": (MoEGPT, MoEConfig)}


def build_network(config: dict):
    """The run's untrained network (its initialisation draws from the global RNG)."""
    if config["network"] not in NETWORKS:
        raise ValueError(f"unknown network {config['network']!r}; choose from {list(NETWORKS)}")
    network, network_config = NETWORKS[config["network"]]
    return network(network_config(**config["model"]))


class RoutingRecorder:
    """Sums each MoE layer's routing over the training steps of one logging interval (`every` steps);
    `row()` gives the means since the interval began.  Reading a row changes nothing (a fingerprint may
    read one between two log rows); the sums restart when the next interval's first step is recorded."""

    def __init__(self, model, every: int):
        self.layers = model.moe_layers() if isinstance(model, MoEGPT) and model.config.n_experts else []
        self.every, self.recorded = every, 0
        self.reset()

    def reset(self):
        self.steps, self.load, self.dropped, self.balance = 0, [0.0] * len(self.layers), [0] * len(self.layers), 0.0

    def record(self):
        if self.recorded and self.recorded % self.every == 0:   # the first step after a log row
            self.reset()
        self.recorded += 1
        self.steps += 1
        for i, layer in enumerate(self.layers):
            self.load[i] = self.load[i] + layer.last["load"]
            self.dropped[i] += layer.last["dropped"] / layer.last["kept"].numel()
            self.balance += layer.last["balance"].item() / len(self.layers)

    def row(self) -> dict:
        if not self.layers:
            return {}
        return {"load": [(load / self.steps).tolist() for load in self.load],
                "dropped": [d / self.steps for d in self.dropped], "balance": self.balance / self.steps}


def fingerprint_steps(config: dict) -> int:
    """The first evaluation interval, at most `fingerprint.STEPS`; 10 steps for a run whose replay on another
    CPU departs from its training early:
    - a peak learning rate of 1e-2 with no warm-up is chaotic from its first steps (measured for pre-LN: a
      replay on generic kernels departs by 3e-5 at step 16 and by 2e-3 at step 38; by less than 1e-6 up to 10);
    - a mixture of experts routes each token to its top experts, and a rounding difference that flips one
      near-tie sends a token elsewhere (moe_shared on generic kernels: weights 2.8e-5 apart at step 20, 6.6e-4
      at step 50)."""
    unstable = config["warmup"] == 0 and config["lr"] >= 1e-2
    routed = config["network"] == "moe" and bool(config["model"].get("n_experts"))
    return min(config["steps"], config["eval_every"], 10 if unstable or routed else fingerprint.STEPS)


@trainer("char_lm", version=1, fingerprint_steps=fingerprint_steps)
def train_char_lm(config: dict, parents=(), desc: str = "train"):
    """Train the config's network on the mini internet's training text; return (model, log)."""
    generator = seed_everything(config["seed"])
    # config["pool_kv_heads"] = g: continue parents[0] with its key/value heads pooled into g (section 09's uptraining)
    model = pool_kv_heads(parents[0], config["pool_kv_heads"]) if "pool_kv_heads" in config else build_network(config)
    # Windows never end on the text's last character: the base model has always been trained so.
    people = config.get("fact_world")
    home = world.fact_world(people) if people else None
    stream = torch.tensor(evals.CHARS.encode(world.fact_text(home) if people else world.load_text("train")))[:-1]
    val = None if people else evals.line_batch(world.load_text("val").splitlines())
    routing, per_step, last = RoutingRecorder(model, config["eval_every"]), {"step_losses": [], "stream_lengths": []}, {}
    if config.get("log_steps"):
        hook = model.blocks[-1].register_forward_hook(lambda module, args, out: last.__setitem__("stream", out[0]))

    def loss_fn(m, windows):
        loss = next_token_loss(m, windows)
        if routing.layers:
            routing.record()
            loss = loss + config["balance"] * m.balance()
        if config.get("log_steps"):
            per_step["step_losses"].append(loss.item())
            per_step["stream_lengths"].append(float(last["stream"].detach().norm(dim=-1).mean()))
        return loss

    def steps_since_last_row() -> dict:
        """Each step's loss and stream length since the last log row (a read: a fingerprint may take it between
        rows, and it is part of what the fingerprint compares)."""
        if not config.get("log_steps"):
            return {}
        done = len(per_step["step_losses"])
        start = (done - 1) // config["eval_every"] * config["eval_every"]
        return {key: values[start:done] for key, values in per_step.items()}

    log = fit(model, lambda: random_windows(stream, model.config.context + 1, config["batch_size"], generator),
              loss_fn, config, desc=desc, stop_after=config.get("stop_after"),
              evaluate=lambda m: {**({"recall": answers.fact_recall(with_capacity(m, None), home)} if people else
                                     {"val_loss": evals.validation_loss(with_capacity(m, None), val)}),
                                  **routing.row(), **steps_since_last_row()})
    if config.get("log_steps"):
        hook.remove()
    return model, log
