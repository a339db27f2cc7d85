"""Modules the training tests use (module level: workers import them)."""

import torch
from torch import nn

# The accuracy tests train the demo's CNN (BatchNorm in both conv blocks).
from dislib_nn.demo import DigitsCNN  # noqa: F401


class MLP(nn.Module):
    """Linear - ReLU - Linear; takes the sizes fit infers."""

    def __init__(self, n_features_in=4, n_outputs=1, hidden=8):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_features_in, hidden), nn.ReLU(),
                                  nn.Linear(hidden, n_outputs))

    def forward(self, x):
        return self.body(x)


class Classifier(nn.Module):
    """A small classifier with BatchNorm and a bias-free layer."""

    def __init__(self, n_features_in=4, n_classes=3, hidden=16,
                 batch_norm=True):
        super().__init__()
        self.hidden = nn.Linear(n_features_in, hidden, bias=False)
        self.norm = nn.BatchNorm1d(hidden) if batch_norm else nn.Identity()
        self.out = nn.Linear(hidden, n_classes)

    def forward(self, x):
        return self.out(torch.relu(self.norm(self.hidden(x))))


class Broken(nn.Module):
    """A module whose forward raises."""

    def __init__(self, n_features_in=4, n_classes=3):
        super().__init__()
        self.fc = nn.Linear(n_features_in, n_classes)

    def forward(self, x):
        raise ValueError("forward exploded on purpose")


class WithDropout(nn.Module):
    def __init__(self, n_features_in=4, n_outputs=1):
        super().__init__()
        self.fc = nn.Linear(n_features_in, n_outputs)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.fc(self.drop(x))


class Lazy(nn.Module):
    """Lazy layers: shaped by a forward pass at fit."""

    def __init__(self, n_outputs=1):
        super().__init__()
        self.fc = nn.LazyLinear(n_outputs)

    def forward(self, x):
        return self.fc(x)
