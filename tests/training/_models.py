"""Modules the training tests use (module level: workers import them)."""

import torch
from torch import nn


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


class DigitsCNN(nn.Module):
    """A small CNN with BatchNorm for 8x8 digits."""

    def __init__(self, n_classes=10, channels=16):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1), nn.BatchNorm2d(channels),
            nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(channels, 2 * channels, 3, padding=1),
            nn.BatchNorm2d(2 * channels), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(2 * channels * 4, n_classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


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
