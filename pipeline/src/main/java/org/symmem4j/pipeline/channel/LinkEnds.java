package org.symmem4j.pipeline.channel;

import org.symmem4j.pipeline.channel.ChannelLayout.Direction;

/**
 * Where one link between adjacent stages lives in a {@link ChannelLayout}, as both of its ends see
 * it: the ranks, the receiver's region, the receiver's data counter and the sender's credit counter.
 */
record LinkEnds(int fromStage, int toStage, int senderRank, int receiverRank, int region, int dataSignal,
                int creditSignal) {

    static LinkEnds of(ChannelLayout layout, int fromStage, int toStage) {
        Direction direction = StageLink.directionInto(fromStage, toStage);
        int region = layout.region(toStage, direction);
        return new LinkEnds(fromStage, toStage, layout.shape().rankOf(fromStage), layout.shape().rankOf(toStage), region,
                layout.dataSignal(region), layout.creditSignal(fromStage, direction));
    }

    @Override
    public String toString() {
        return "stage " + fromStage + " -> stage " + toStage + " (rank " + senderRank + " -> rank " + receiverRank + ", region "
                + region + ")";
    }
}
