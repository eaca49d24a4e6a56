"""A clean ResNet-style CNN with BatchNorm (small for tests, ResNet-18-sized for the benchmark)."""
from __future__ import annotations

import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)  # the same ReLU module called twice, as in torchvision's BasicBlock


class ResNet(nn.Module):
    def __init__(self, widths: tuple[int, ...], blocks: tuple[int, ...], num_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], widths[0]
        for i, (width, count) in enumerate(zip(widths, blocks)):
            stride = 1 if i == 0 else 2
            layers.append(nn.Sequential(*[BasicBlock(cin if j == 0 else width, width, stride if j == 0 else 1) for j in range(count)]))
            cin = width
        self.layer1, self.layer2, self.layer3, self.layer4 = (layers + [nn.Identity()] * 4)[:4]
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _randomize_bn(model: nn.Module, seed: int) -> nn.Module:
    # Fresh BatchNorm layers are identities (mean 0, var 1); give them real statistics so folding them matters.
    generator = torch.Generator().manual_seed(seed)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.copy_(torch.randn(module.num_features, generator=generator) * 0.1)
            module.running_var.copy_(torch.rand(module.num_features, generator=generator) + 0.5)
            module.weight.data.copy_(torch.rand(module.num_features, generator=generator) + 0.5)
            module.bias.data.copy_(torch.randn(module.num_features, generator=generator) * 0.1)
    return model


def build_small_resnet(num_classes: int = 10) -> nn.Module:
    """A 2-stage ResNet (~40k parameters) for tests; input x:1x3x32x32:float32."""
    torch.manual_seed(0)
    return _randomize_bn(ResNet((8, 16), (1, 1), num_classes), seed=0).eval()


def build_resnet18(num_classes: int = 1000) -> nn.Module:
    """ResNet-18 layout (11.7M parameters) for the benchmark; input x:1x3x224x224:float32."""
    torch.manual_seed(0)
    return _randomize_bn(ResNet((64, 128, 256, 512), (2, 2, 2, 2), num_classes), seed=0).eval()
