"""Models as users deploy them: trained-looking BatchNorm statistics, and ONNX files rewritten by other tools.

Random initialisation leaves every BatchNorm at weight 1, bias 0, mean 0, var 1: a Conv fused with it then equals
the bare Conv, and a fusion bug hides. :func:`trained_like` draws seeded statistics so a fused Conv really differs
from the bare one, as with released weights. The tool wrappers (:func:`slimmed`, :func:`ort_optimized`,
:func:`without_scopes`, :func:`without_output`) turn an ONNX model into what onnxslim, ONNX Runtime's transformer
optimizer, a name-stripping tool or Optimum (a BertModel saved without ``pooler_output``) hand a user.
"""
from __future__ import annotations

import io
import tempfile
import warnings
from pathlib import Path

import onnx
import torch
from torch import nn

SEED = 0


def trained_like(model: nn.Module, seed: int = 1) -> nn.Module:
    """Seeded non-trivial BatchNorm affine parameters and running statistics (as released weights have)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.running_mean is not None:
                n = module.num_features
                if module.affine:
                    module.weight.copy_(torch.rand(n, generator=generator) + 0.5)
                    module.bias.copy_(torch.randn(n, generator=generator) * 0.2)
                module.running_mean.copy_(torch.randn(n, generator=generator) * 0.5)
                module.running_var.copy_(torch.rand(n, generator=generator) * 1.5 + 0.5)
        for name, parameter in model.named_parameters():
            # layer scale (timm's ConvNeXt gamma starts at 1e-6, which hides every block from the output)
            if name.rsplit(".", 1)[-1] in ("gamma", "ls1", "ls2") and parameter.dim() == 1:
                parameter.copy_(torch.rand(parameter.shape, generator=generator) * 0.5 + 0.1)
    return model.eval()


class BatchNormAct2d(nn.BatchNorm2d):
    """A BatchNorm that applies its activation itself, as timm's ``BatchNormAct2d`` (mobilenetv3, regnet, efficientnet):
    the activation is a child module, so it completes before the BatchNorm in torch's hook order."""

    def __init__(self, channels: int) -> None:
        super().__init__(channels)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(super().forward(x))


class ConvBnNet(nn.Module):
    """Conv -> BatchNormAct twice, then a head: what every Conv+BN fusion rewrites."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, 3, padding=1)
        self.bn1 = BatchNormAct2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=2, padding=1, bias=False)
        self.bn2 = BatchNormAct2d(channels)
        self.head = nn.Linear(channels, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.bn2(self.conv2(self.bn1(self.conv1(x))))
        return self.head(x.mean(dim=(2, 3)))


def conv_bn_net() -> nn.Module:
    """Input x:1x3x16x16:float32."""
    torch.manual_seed(SEED)
    return trained_like(ConvBnNet())


def tiny_bert() -> nn.Module:
    """transformers' BertModel from a small config (eager attention): last_hidden_state and pooler_output.
    Inputs input_ids, attention_mask, token_type_ids (int64).

    Its forward takes input_ids alone and passes it by keyword: transformers 5's BertModel given positional
    arguments under the TorchScript tracer gets use_cache twice; Optimum exports it the same way.
    """
    from transformers import BertConfig, BertModel

    class KeywordBert(BertModel):
        def forward(self, input_ids, attention_mask, token_type_ids):  # type: ignore[override]
            return super().forward(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)

    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32)
    config._attn_implementation = "eager"
    torch.manual_seed(SEED)
    return KeywordBert(config).eval()


def export(model: nn.Module, args: tuple, input_names: list[str], output_names: list[str],
           dynamo: bool = True, dynamic_axes: dict | None = None) -> onnx.ModelProto:
    """torch.onnx.export to memory; the TorchScript exporter at opset 17 with ``dynamic_axes`` as Optimum uses it."""
    buffer = io.BytesIO()
    options = {} if dynamo else {"opset_version": 17, "dynamic_axes": dynamic_axes}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, buffer, input_names=input_names, output_names=output_names, dynamo=dynamo,
                          **options)
    return onnx.load_from_string(buffer.getvalue())


def slimmed(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnxslim's output: BatchNorm folded into the Conv (the weight keeps the conv's name), scopes dropped."""
    import onnxslim

    return onnxslim.slim(model)


def ort_optimized(model: onnx.ModelProto, num_heads: int, hidden_size: int, model_type: str = "bert") -> onnx.ModelProto:
    """ONNX Runtime's transformer optimizer: SkipLayerNormalization, LayerNormalization, (Fast/Bias)Gelu fusions.

    ``model_type="gpt2"`` fails on the dynamo exporter's GPT-2 graph in onnxruntime 1.32 (an IndexError in its
    Gemm post-processing), so GPT-2 graphs get the BERT fusions, which cover the same LayerNorm/Gelu patterns.
    """
    from onnxruntime.transformers import optimizer

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.onnx"
        onnx.save(model, str(path))
        return optimizer.optimize_model(str(path), model_type=model_type, num_heads=num_heads,
                                        hidden_size=hidden_size).model


def ort_layout_optimized(model: onnx.ModelProto) -> onnx.ModelProto:
    """The file ONNX Runtime saves at ORT_ENABLE_ALL (``SessionOptions.optimized_model_filepath``): on a CPU its
    layout transformer turns Convs into com.microsoft.nchwc ops whose values are blocked NCHWc (channels in blocks
    of 8 or 16 under the same shape when the channel count is a multiple of the block), with ReorderOutput back."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as folder:
        source, target = Path(folder) / "in.onnx", Path(folder) / "out.onnx"
        onnx.save(model, str(source))
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.optimized_model_filepath = str(target)
        options.log_severity_level = 3  # its warning that the file is hardware specific is the point here
        ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        return onnx.load(str(target))


def without_scopes(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every node name and metadata (module scopes, stack traces) stripped, as name-normalising tools do."""
    stripped = onnx.ModelProto()
    stripped.CopyFrom(model)
    for i, node in enumerate(stripped.graph.node):
        node.name = f"n{i}"
        del node.metadata_props[:]
    return stripped


def without_output(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """The file without the output ``name`` (and the nodes only it needed), as Optimum saves a BertModel."""
    kept = [o.name for o in model.graph.output if o.name != name]
    inputs = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    with tempfile.TemporaryDirectory() as folder:
        path, out = Path(folder) / "in.onnx", Path(folder) / "out.onnx"
        onnx.save(model, str(path))
        onnx.utils.extract_model(str(path), str(out), inputs, kept)
        return onnx.load(str(out))


class OnetLike(nn.Module):
    """MTCNN ONet's interface at a tenth of its size: a 48x48 face crop in, box (4), landmarks (10) and
    probabilities (2) out as a tuple, as facenet-pytorch's ONet returns them (its order: b, c, a)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.prelu1 = nn.PReLU(8)
        self.pool = nn.AdaptiveAvgPool2d(4)
        self.dense = nn.Linear(8 * 16, 32)
        self.box = nn.Linear(32, 4)
        self.landmarks = nn.Linear(32, 10)
        self.prob = nn.Linear(32, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = torch.relu(self.dense(torch.flatten(self.pool(self.prelu1(self.conv1(x))), 1)))
        return self.box(h), self.landmarks(h), torch.softmax(self.prob(h), dim=1)


def onet_like() -> nn.Module:
    """Input x:1x3x48x48:float32."""
    torch.manual_seed(SEED)
    return OnetLike().eval()


def mtcnn_onet() -> nn.Module:
    """facenet-pytorch's MTCNN ONet with the weights its wheel ships (input x:1x3x48x48:float32; outputs box 4,
    landmarks 10, probabilities 2, returned as a tuple).

    facenet-pytorch (like timm) requires torchvision, whose PyPI wheel breaks beside the CPU torch: install it
    without dependencies (``scripts/setup_deploy_corpus.sh``)."""
    from sample_models.zoo import torchvision_models

    with torchvision_models():  # facenet_pytorch imports torchvision; its compiled ops are not needed
        from facenet_pytorch.models.mtcnn import ONet
    return ONet(pretrained=True).eval()


class TwoHeads(nn.Module):
    """Two outputs of the same shape: a deployment that serves them in the other order differs by values only."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(6, 3)
        self.second = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.first(x), self.second(x)


def two_heads() -> nn.Module:
    """Input x:1x6:float32."""
    torch.manual_seed(SEED)
    return TwoHeads().eval()


class TanhPooler(nn.Module):
    """BERT's pooler: the first token through a Linear and a Tanh (ONNX Runtime fuses the two into one FusedGemm)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.dense = nn.Linear(width, width)
        self.activation = nn.Tanh()

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(hidden[:, 0]))


class PooledEncoder(nn.Module):
    """A Linear encoder and a BERT-style pooler: outputs hidden and pooled. Input x:1x4x16:float32."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.encoder = nn.Linear(width, width)
        self.pooler = TanhPooler(width)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.encoder(x)
        return hidden, self.pooler(hidden)


def pooled_encoder() -> nn.Module:
    """Small pooler pre-activations (tanh(x) within 5% of x), as a BERT pooler's are."""
    torch.manual_seed(SEED)
    model = PooledEncoder()
    with torch.no_grad():
        model.pooler.dense.weight.mul_(0.5)
    return model.eval()


class Intermediate(nn.Module):
    """BERT's intermediate block: a Linear and its GELU (ONNX Runtime fuses the bias add and the GELU: BiasGelu)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.dense = nn.Linear(width, 2 * width)
        self.intermediate_act_fn = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.intermediate_act_fn(self.dense(x))


class FeedForward(nn.Module):
    """A BERT-style feed-forward: intermediate (Linear + GELU), then an output Linear. Input x:1x4x16:float32."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.intermediate = Intermediate(width)
        self.output = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(self.intermediate(x))


def feed_forward() -> nn.Module:
    """Trained-looking biases: small but not zero (a few % of the Linear's output, as MiniLM's are; a fresh
    transformers BERT has zero biases, which hides a value taken before its bias)."""
    torch.manual_seed(SEED)
    model = FeedForward()
    with torch.no_grad():
        model.intermediate.dense.bias.copy_(torch.linspace(-0.06, 0.06, model.intermediate.dense.out_features))
    return model.eval()
