"""Honest models of the architectures people federate, in plain torch (no torchvision here): the calibration set
of the inspector's fishing check (``bench_inspect_honest.py``, issue 47 class 9).

Each follows its reference implementation's layout and initialization at CIFAR scale (32 x 32 inputs):

* ``vgg11`` — Simonyan & Zisserman (2015) configuration A with batch norm, the CIFAR layout of kuangliu's
  pytorch-cifar (``features`` then one ``classifier = Linear(512, C)``), PyTorch's default initialization;
* ``vgg11-tv`` — the same with torchvision's ``VGG._initialize_weights`` (conv Kaiming-normal fan-out, batch norm
  1/0, linear N(0, 0.01) with zero bias) and torchvision's three-layer classifier (width 512 here, dropout 0.5);
* ``resnet18`` — He et al. (2016), the CIFAR ResNet-18 (3 x 3 stem, four stages of two basic blocks, ``linear``);
* ``mobilenetv2`` — Sandler et al. (2018), torchvision's inverted-residual settings (stride 1 at the stem for
  32 x 32) and its initialization (``classifier`` Linear(1280, C) N(0, 0.01), zero bias, dropout 0.2);
* ``vit-tiny`` / ``vit-tiny-zero-head`` — Dosovitskiy et al. (2021) with DeiT-tiny widths (192, 3 heads, depth
  6 here), patch 4, class token, truncated-normal 0.02 initialization; the second with the zero-initialized head
  of the JAX reference;
* ``mlp-mnist`` (784-256-128-C), ``mlp-cifar`` (3072-512-C) and ``mlp-small`` (784-64-16-C: a head of 16
  features), PyTorch's default initialization.
"""

from __future__ import annotations


import torch
from torch import nn

VGG11 = [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"]


def _features(cfg):
    layers, channels = [], 3
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(channels, v, 3, padding=1), nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
            channels = v
    return nn.Sequential(*layers)


class VGG(nn.Module):
    def __init__(self, classes: int, torchvision: bool = False):
        super().__init__()
        self.features = _features(VGG11)
        if torchvision:
            self.classifier = nn.Sequential(nn.Linear(512, 512), nn.ReLU(True), nn.Dropout(0.5), nn.Linear(512, 512),
                                            nn.ReLU(True), nn.Dropout(0.5), nn.Linear(512, classes))
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                    nn.init.zeros_(m.bias)
                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.ones_(m.weight)
                    nn.init.zeros_(m.bias)
                elif isinstance(m, nn.Linear):
                    nn.init.normal_(m.weight, 0, 0.01)
                    nn.init.zeros_(m.bias)
        else:
            self.classifier = nn.Linear(512, classes)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet18(nn.Module):
    def __init__(self, classes: int):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        blocks, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*blocks)
        self.linear = nn.Linear(512, classes)

    def forward(self, x):
        out = self.layers(torch.relu(self.bn1(self.conv1(x))))
        return self.linear(out.mean((2, 3)))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        layers = [] if expand == 1 else [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(True)]
        layers += [nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden),
                   nn.ReLU6(True), nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.conv(x) if self.residual else self.conv(x)


class MobileNetV2(nn.Module):
    SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 1), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1)]

    def __init__(self, classes: int):
        super().__init__()
        layers, cin = [nn.Conv2d(3, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6(True)], 32
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers += [nn.Conv2d(cin, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.ReLU6(True)]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))
        for m in self.modules():  # torchvision's MobileNetV2 initialization
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        return self.classifier(self.features(x).mean((2, 3)))


class ViT(nn.Module):
    def __init__(self, classes: int, dim=192, depth=6, heads=3, patch=4, zero_head=False):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        tokens = (32 // patch) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, tokens + 1, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        if zero_head:
            nn.init.zeros_(self.head.weight)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(len(x), -1, -1), x], 1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


class MLP(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        layers = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.net = nn.Sequential(*layers[:-1])

    def forward(self, x):
        return self.net(x.flatten(1))


#: name -> (builder(classes), input shape)
ARCHITECTURES = {
    "vgg11": (lambda c: VGG(c), (3, 32, 32)),
    "vgg11-tv": (lambda c: VGG(c, torchvision=True), (3, 32, 32)),
    "resnet18": (lambda c: ResNet18(c), (3, 32, 32)),
    "mobilenetv2": (lambda c: MobileNetV2(c), (3, 32, 32)),
    "vit-tiny": (lambda c: ViT(c), (3, 32, 32)),
    "vit-tiny-zero-head": (lambda c: ViT(c, zero_head=True), (3, 32, 32)),
    "mlp-mnist": (lambda c: MLP([784, 256, 128, c]), (1, 28, 28)),
    "mlp-cifar": (lambda c: MLP([3072, 512, c]), (3, 32, 32)),
    "mlp-small": (lambda c: MLP([784, 64, 16, c]), (1, 28, 28)),
}


def build(name: str, classes: int = 10, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return ARCHITECTURES[name][0](classes)


def sgd_steps(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor, steps: int, lr: float = 0.05,
              batch: int = 16, seed: int = 0) -> nn.Module:
    """``steps`` plain SGD steps on batches drawn from ``inputs`` (a client's local training)."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        index = torch.randint(len(inputs), (min(batch, len(inputs)),), generator=generator)
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(inputs[index]), labels[index]).backward()
        optimizer.step()
    model.eval()
    return model


def client_data(shape, classes: int, n: int = 64, seed: int = 0, one_class: bool = False):
    """Inputs shaped like the architecture's, from fedleak's embedded photos / digits (resized), and labels: all
    classes, or one class only (a non-IID client)."""
    import fedleak

    name = "digits" if shape[0] == 1 else "photos"
    _, parts = fedleak.data.load(name, num_clients=1, samples_per_client=n, seed=seed)
    x = parts[0].inputs
    if tuple(x.shape[1:]) != tuple(shape):
        x = nn.functional.interpolate(x, size=shape[1:], mode="bilinear", align_corners=False)
    y = parts[0].labels % classes
    if one_class:
        y = torch.full_like(y, seed % classes)
    return x, y


__all__ = ["ARCHITECTURES", "build", "client_data", "sgd_steps"]
