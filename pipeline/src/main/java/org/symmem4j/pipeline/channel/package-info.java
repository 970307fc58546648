/**
 * Stage-to-stage links over symmetric memory. A {@link org.symmem4j.pipeline.channel.StageLink}
 * joins two adjacent stages on different ranks, in host or GPU memory alike: the sender puts a message
 * (header + payload in host memory, the payload alone in GPU memory) into a slot of the receiver's memory and adds 1 to the receiver's data counter (release); the receiver
 * waits on that counter (acquire), reads the message in place and adds 1 to the sender's credit
 * counter when done, which frees the slot. {@link org.symmem4j.pipeline.channel.ChannelLayout} places
 * every link of a pipeline in one allocation; {@link org.symmem4j.pipeline.channel.LinkPlan} checks
 * that a schedule can run over bounded FIFO links and how many slots it needs.
 */
package org.symmem4j.pipeline.channel;
