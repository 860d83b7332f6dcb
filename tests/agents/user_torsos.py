"""Importable torso factories for the user-torso tests (a checkpoint records them by import path)."""


def torch_torso(shape):
    """A small conv torso over channels-last boards, as a user would write one in PyTorch."""
    from torch import nn

    class Torso(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(shape[-1], 3, 3, padding=1)

        def forward(self, x):
            return nn.functional.relu(self.conv(x.permute(0, 3, 1, 2))).flatten(1)

    return Torso()


def keras_torso(shape):
    """The same idea as a Keras layer stack (channels last natively)."""
    import keras

    return keras.Sequential([keras.layers.Conv2D(3, 3, padding="same", activation="relu"), keras.layers.Flatten()])
