"""CPU stand-in for count_correct.cu: writes the number of rows whose first largest logit is the label, returns 0."""


def count_correct(logits, labels, correct, M, C):
    correct[0] = int((logits.argmax(1) == labels).sum())  # argmax: the first of equal largest values
    return 0
