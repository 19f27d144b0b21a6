import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers):
        super(Model, self).__init__()  # noqa: UP008 (as KernelBench writes it)
        self.gru = nn.GRU(input_size, hidden_size, num_layers, bidirectional=True)

    def forward(self, x, h0):
        output, h_n = self.gru(x, h0)
        return output


seq_len = 512
batch_size = 10
input_size = 128
hidden_size = 256
num_layers = 6


def get_inputs():
    return [torch.rand(seq_len, batch_size, input_size),
            torch.rand(num_layers * 2, batch_size, hidden_size)]


def get_init_inputs():
    return [input_size, hidden_size, num_layers]
