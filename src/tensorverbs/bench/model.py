"""AlexNet (the single-tower variant with 64/192/384/256/256 convolution channels, about
61 M parameters) for 224x224 RGB images, and the shapes of its parameters.

:data:`PARAMETER_SHAPES` lists the parameters in ``named_parameters()`` order so that a
benchmark without torch moves tensors of the same sizes; a test checks it against the
model.
"""
from __future__ import annotations

import math

IMAGE_SIZE = 224
CLASSES = 1000

#: (name, shape) of every parameter, in the order of ``AlexNet().named_parameters()``
PARAMETER_SHAPES: list[tuple[str, tuple[int, ...]]] = [
    ("features.0.weight", (64, 3, 11, 11)), ("features.0.bias", (64,)),
    ("features.3.weight", (192, 64, 5, 5)), ("features.3.bias", (192,)),
    ("features.6.weight", (384, 192, 3, 3)), ("features.6.bias", (384,)),
    ("features.8.weight", (256, 384, 3, 3)), ("features.8.bias", (256,)),
    ("features.10.weight", (256, 256, 3, 3)), ("features.10.bias", (256,)),
    ("classifier.1.weight", (4096, 256 * 6 * 6)), ("classifier.1.bias", (4096,)),
    ("classifier.4.weight", (4096, 4096)), ("classifier.4.bias", (4096,)),
    ("classifier.6.weight", (CLASSES, 4096)), ("classifier.6.bias", (CLASSES,)),
]

PARAMETERS = sum(math.prod(shape) for _, shape in PARAMETER_SHAPES)


def alexnet():
    """A new AlexNet as a ``torch.nn.Module`` (needs torch)."""
    from torch import nn

    class AlexNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            relu = lambda: nn.ReLU(inplace=True)  # noqa: E731
            self.features = nn.Sequential(
                nn.Conv2d(3, 64, kernel_size=11, stride=4, padding=2), relu(),        # 0, 1
                nn.MaxPool2d(kernel_size=3, stride=2),                                 # 2
                nn.Conv2d(64, 192, kernel_size=5, padding=2), relu(),                  # 3, 4
                nn.MaxPool2d(kernel_size=3, stride=2),                                 # 5
                nn.Conv2d(192, 384, kernel_size=3, padding=1), relu(),                 # 6, 7
                nn.Conv2d(384, 256, kernel_size=3, padding=1), relu(),                 # 8, 9
                nn.Conv2d(256, 256, kernel_size=3, padding=1), relu(),                 # 10, 11
                nn.MaxPool2d(kernel_size=3, stride=2),                                 # 12
            )
            self.classifier = nn.Sequential(
                nn.Dropout(0.5), nn.Linear(256 * 6 * 6, 4096), relu(),                 # 0, 1, 2
                nn.Dropout(0.5), nn.Linear(4096, 4096), relu(),                        # 3, 4, 5
                nn.Linear(4096, CLASSES),                                              # 6
            )

        def forward(self, images):
            return self.classifier(self.features(images).flatten(1))

    return AlexNet()
