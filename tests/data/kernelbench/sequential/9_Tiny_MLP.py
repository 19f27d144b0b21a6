import torch
import torch.nn as nn


class Model(nn.Module):
    """Two linear layers in an nn.Sequential: parameters named network.0.weight and so on."""

    def __init__(self, input_size, hidden_size, output_size):
        super().__init__()
        self.network = nn.Sequential(nn.Linear(input_size, hidden_size), nn.ReLU(),
                                     nn.Linear(hidden_size, output_size))

    def forward(self, x):
        return self.network(x)


batch_size = 8
input_size = 64
hidden_size = 32
output_size = 16


def get_inputs():
    return [torch.rand(batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_size, output_size]
